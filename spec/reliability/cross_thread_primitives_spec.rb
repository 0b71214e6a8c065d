# frozen_string_literal: true

require "spec_helper"

# A primitive's wakers called from another thread than its waiters' loop
# raise Evix::Error before anything changes: the waiter stays listed and a
# wake-up made afterwards on the loop's thread still reaches it.
RSpec.describe "Primitives called from another thread" do
  let(:loop) { Evix::Loop.new }

  after { loop.close unless loop.closed? }

  def from_thread(&block)
    Thread.new do
      block.call
      :no_error
    rescue Evix::Error => e
      e.message
    end.value
  end

  it "Condition#signal and #broadcast" do
    condition = Evix::Condition.new
    waiter = loop.spawn { condition.wait }
    loop.run_once(0)
    message = from_thread { condition.signal(:wrong) }
    expect(message).to match(/Evix::Condition has tasks waiting on a loop of another thread/)
    expect(from_thread { condition.broadcast(:wrong) }).to match(/another thread/)
    expect(condition.waiting?).to be(true)
    expect(condition.signal(:right)).to be(true)
    expect(waiter.wait).to eq(:right)
  end

  it "Semaphore#release keeps its count and the waiter gets the place later" do
    semaphore = Evix::Semaphore.new(1)
    holder = loop.spawn { semaphore.acquire { loop.suspend } }
    waiter = loop.spawn { semaphore.acquire { :got } }
    loop.run_once(0)
    semaphore_release = from_thread { semaphore.release }
    expect(semaphore_release).to match(/Evix::Semaphore has tasks waiting on a loop of another thread/)
    expect(semaphore.count).to eq(1)
    holder.cancel
    loop.run
    expect(waiter.wait).to eq(:got)
    expect([semaphore.count, semaphore.available?]).to eq([0, true])
  end

  it "Queue#push keeps the item out and the popper gets the next one" do
    queue = Evix::Queue.new
    popper = loop.spawn { queue.pop }
    loop.run_once(0)
    expect(from_thread { queue.push(:lost) }).to match(/Evix::Queue has tasks waiting/)
    expect(queue.size).to eq(0)
    queue.push(:kept)
    expect(popper.wait).to eq(:kept)
  end

  it "Queue#close leaves the queue open" do
    queue = Evix::Queue.new
    popper = loop.spawn { queue.pop }
    loop.run_once(0)
    expect(from_thread { queue.close }).to match(/another thread/)
    expect(queue.closed?).to be(false)
    queue.close
    expect(popper.wait).to be_nil
  end

  it "Queue#pop with a pusher waiting leaves the item and the pusher in place" do
    queue = Evix::Queue.new(1)
    queue.push(:first)
    pusher = loop.spawn { queue.push(:second) && :pushed }
    loop.run_once(0)
    expect(from_thread { queue.pop }).to match(/another thread/)
    expect(queue.size).to eq(1)
    expect(queue.pop).to eq(:first)
    expect(pusher.wait).to eq(:pushed)
    expect(queue.pop).to eq(:second)
  end

  it "works across threads when the wake is posted to the loop's thread" do
    queue = Evix::Queue.new
    popper = loop.spawn { queue.pop }
    loop.run_once(0)
    Thread.new { loop.post { queue.push(:posted) } }.join
    expect(popper.wait).to eq(:posted)
  end
end
