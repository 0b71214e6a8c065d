# frozen_string_literal: true

require "spec_helper"

# Edges of Evix::Barrier, Semaphore, Queue and Condition beyond their own spec
# files: calls outside a task, bad limits, wakeups from loop callbacks,
# failures nobody waits for yet, and Evix.run waiting for barrier children.
RSpec.describe "Evix structured concurrency primitives, edges" do
  let(:ev) { new_loop }

  it "skips a waiter whose loop was closed: its wait can never end, and the wake goes to the next" do
    condition = Evix::Condition.new
    queue = Evix::Queue.new
    gone = Evix::Loop.new
    2.times { gone.spawn { condition.wait } }
    gone.spawn { queue.pop }
    gone.run_once(0)
    gone.close
    expect(condition.signal(:lost)).to be(false)
    expect(condition.broadcast(:lost)).to eq(0)
    live = Evix::Loop.new
    waiter = live.spawn { condition.wait }
    popper = live.spawn { queue.pop }
    live.run_once(0)
    expect(condition.signal(:kept)).to be(true)
    queue.push(:item)
    expect([waiter.wait, popper.wait]).to eq(%i[kept item])
  ensure
    live&.close
  end

  it "raises Evix::Error outside a task only when it would have to wait" do
    queue = Evix::Queue.new
    queue << :ready
    expect(queue.pop).to eq(:ready)
    expect { queue.pop }.to raise_error(Evix::Error, /Evix::Queue#pop .*inside a task/)
    expect { Evix::Condition.new.wait }.to raise_error(Evix::Error, /Evix::Condition#wait/)
    semaphore = Evix::Semaphore.new(1)
    expect(semaphore.acquire { :held }).to eq(:held)
    semaphore.acquire
    expect { semaphore.acquire }.to raise_error(Evix::Error, /Evix::Semaphore#acquire/)
    expect { Evix::Barrier.new.async { nil } }.to raise_error(Evix::Error, /Evix::Barrier#async/)
  end

  it "rejects a limit that is not a positive Integer, and a release without an acquire" do
    expect { Evix::Semaphore.new(0) }.to raise_error(ArgumentError, /got 0/)
    expect { Evix::Semaphore.new(1.5) }.to raise_error(ArgumentError, /got 1.5/)
    expect { Evix::Queue.new(0) }.to raise_error(ArgumentError, /got 0/)
    expect { Evix::Semaphore.new(1).release }.to raise_error(Evix::Error, /without a matching acquire/)
  end

  it "keeps order when loop callbacks push to waiting poppers and pop from a full queue" do
    unbounded = Evix::Queue.new
    bounded = Evix::Queue.new(1)
    popped = []
    pushed = []
    ev.spawn { 2.times { popped << unbounded.pop } }
    ev.add_timer(0.01) { unbounded << 1 << 2 }
    ev.spawn do
      %i[a b c].each do |item|
        bounded.push(item)
        pushed << item
      end
    end
    ev.add_timer(0.02) { 3.times { popped << bounded.pop } }
    ev.run
    expect(popped).to eq([1, 2, :a, :b, :c])
    expect(pushed).to eq(%i[a b c])
    expect(bounded.size).to eq(0)
  end

  it "does not raise a barrier child's failure out of the loop; #wait raises it, also later" do
    barrier = Evix::Barrier.new
    raised = []
    ev.spawn do
      barrier.async { raise EvixSpecError, "early" }
      ev.sleep(0.02) # the child has failed by now, with nobody waiting
      2.times do
        barrier.wait
      rescue EvixSpecError => e
        raised << e.message
      end
    end
    expect { ev.run }.not_to raise_error
    expect(raised).to eq(%w[early early])
    expect(barrier.errors.size).to eq(1)
  end

  it "a waiting pusher that is cancelled leaves its item out of a full queue" do
    queue = Evix::Queue.new(1)
    outcome = nil
    ev.spawn do
      queue << :a
      pusher = ev.spawn { queue << :b }
      ev.sleep(0.01)
      pusher.cancel
      ev.sleep(0.01)
      outcome = [queue.pop, queue.size, pusher.cancelled?]
    end
    ev.run
    expect(outcome).to eq([:a, 0, true])
  end

  it "under Evix.run, the run waits for a barrier child nobody waited for" do
    result = in_child(timeout: 5) do
      finished = false
      Evix.run do
        Evix::Barrier.new.async do
          sleep 0.05
          finished = true
        end
      end
      finished
    end
    expect(result).to be(true)
  end
end
