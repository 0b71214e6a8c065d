# frozen_string_literal: true

require "spec_helper"

# Evix::Condition between tasks of one loop, never blocking the thread.
RSpec.describe Evix::Condition do
  let(:ev) { new_loop }

  it "#wait returns the value given to #signal; #signal says whether someone waited" do
    condition = Evix::Condition.new
    got = nil
    signalled = []
    ev.spawn { got = condition.wait }
    ev.spawn do
      signalled << condition.waiting?
      signalled << condition.signal(:value)
      ev.sleep(0)
      signalled << condition.waiting? << condition.signal(:nobody)
    end
    ev.run
    expect(got).to eq(:value)
    expect(signalled).to eq([true, true, false, false])
  end

  it "#signal wakes one waiter at a time; the others go on waiting" do
    condition = Evix::Condition.new
    woken = []
    3.times { |i| ev.spawn { woken << [i, condition.wait] } }
    steps = []
    ev.spawn do
      condition.signal(:one)
      ev.sleep(0.01)
      steps << [woken.size, condition.waiting?]
      condition.signal(:two)
      ev.sleep(0.01)
      steps << woken.size
      condition.signal(:three)
    end
    ev.run
    expect(steps).to eq([[1, true], 2])
    expect(woken.map(&:last)).to eq(%i[one two three])
    expect(woken.map(&:first).sort).to eq([0, 1, 2])
  end

  it "#broadcast wakes every waiter with its value" do
    condition = Evix::Condition.new
    woken = []
    3.times { |i| ev.spawn { woken << [i, condition.wait] } }
    ev.spawn do
      ev.sleep(0.01)
      condition.broadcast(:all)
    end
    ev.run
    expect(woken.sort).to eq([[0, :all], [1, :all], [2, :all]])
  end

  it "#signal and #broadcast without a value wake with nil" do
    condition = Evix::Condition.new
    woken = []
    2.times { ev.spawn { woken << condition.wait(timeout: 2) } }
    ev.spawn do
      ev.sleep(0.01)
      condition.signal
      condition.broadcast
    end
    expect(elapsed { ev.run }).to be < 1
    expect(woken).to eq([nil, nil])
  end

  it "#wait(timeout:) returns nil when nobody signals in time; a signal is not remembered", timing: true do
    condition = Evix::Condition.new
    result = :not_set
    took = nil
    ev.spawn do
      condition.signal(:too_early) # nobody waits: lost
      t0 = now
      result = condition.wait(timeout: 0.05)
      took = now - t0
    end
    ev.run
    expect(result).to be_nil
    expect(took).to be_between(0.04, 0.5)
    expect(condition.waiting?).to be(false)
  end

  it "a cancelled waiter stops waiting; a later signal goes to the next one" do
    condition = Evix::Condition.new
    woken = []
    first = ev.spawn { woken << [:first, condition.wait] }
    ev.spawn { woken << [:second, condition.wait] }
    ev.spawn do
      ev.sleep(0.01)
      first.cancel
      ev.sleep(0)
      condition.signal(:go)
      ev.sleep(0)
    end
    ev.run
    expect(woken).to eq([%i[second go]])
    expect(condition.waiting?).to be(false)
    expect { first.wait }.to raise_error(Evix::CancelledError)
  end

  it "works between Fiber.schedule fibers under Evix.run, while other fibers keep running" do
    Evix.backends.each do |backend|
      result = evix_run_in_child(backend) do
        condition = Evix::Condition.new
        ticks = 0
        got = nil
        Fiber.schedule { got = condition.wait }
        Fiber.schedule do
          5.times do
            sleep 0.005
            ticks += 1
          end
          condition.broadcast(:ready)
        end
        sleep 0.005 until got
        [got, ticks]
      end
      expect(result).to eq([:ready, 5]), "#{backend}: #{result.inspect}"
    end
  end
end
