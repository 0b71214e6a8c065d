# frozen_string_literal: true

require "spec_helper"

RSpec.describe Evix::Task do
  let(:ev) { new_loop }

  describe "Evix::Loop#spawn" do
    it "returns a Task that runs its block on the loop, not at the call" do
      ran = false
      task = ev.spawn { ran = true }
      expect(task).to be_a(described_class)
      expect(ran).to be(false)
      expect(task.alive?).to be(true)
      ev.run
      expect(ran).to be(true)
      expect(task.alive?).to be(false)
    end

    it "runs the block in its own fiber, with Task.current set to the task only there" do
      seen = nil
      fiber = nil
      task = ev.spawn do
        seen = described_class.current
        fiber = Fiber.current
      end
      ev.run
      expect(seen).to equal(task)
      expect(fiber).not_to equal(Fiber.current)
      expect(described_class.current).to be_nil
    end

    it "starts tasks in the order they were spawned and interleaves them at waits", timing: true do
      log = []
      # Sleeps far apart: b starts after a, and on a loaded machine that can
      # take longer than a few milliseconds.
      ev.spawn do
        log << :a1
        ev.sleep(0.1)
        log << :a2
      end
      ev.spawn do
        log << :b1
        ev.sleep(0.01)
        log << :b2
      end
      ev.run
      expect(log).to eq(%i[a1 b1 b2 a2])
    end

    it "raises ArgumentError without a block" do
      expect { ev.spawn }.to raise_error(ArgumentError, /block/)
    end

    it "raises Evix::ClosedError on a closed loop" do
      ev.close
      expect { ev.spawn {} }.to raise_error(Evix::ClosedError)
    end
  end

  describe "#wait" do
    it "returns the value from outside run, running the loop until the task is done" do
      task = ev.spawn do
        ev.sleep(0.02)
        42
      end
      expect(task.wait).to eq(42)
      expect(task.alive?).to be(false)
    end

    it "returns the value at once, again and again, once the task is done" do
      task = ev.spawn { [:value] }
      ev.run
      first = task.wait
      expect(first).to eq([:value])
      expect(task.wait).to equal(first)
    end

    it "returns nil for a block that returns nil" do
      task = ev.spawn { nil }
      expect(task.wait).to be_nil
    end

    it "suspends only the waiting task and returns the value inside another task" do
      log = []
      inner = ev.spawn do
        ev.sleep(0.05)
        :inner_value
      end
      outer = ev.spawn do
        log << :outer_waits
        value = inner.wait
        log << [:outer_got, value]
        value.to_s
      end
      ev.spawn { log << :other_task_ran }
      ev.run
      expect(log).to eq([:outer_waits, :other_task_ran, %i[outer_got inner_value]])
      expect(outer.wait).to eq("inner_value")
    end

    it "wakes every task that waits on the same task" do
      target = ev.spawn do
        ev.sleep(0.02)
        :shared
      end
      waiters = Array.new(3) { ev.spawn { target.wait } }
      ev.run
      expect(waiters.map(&:wait)).to eq(%i[shared shared shared])
    end

    it "raises the task's own exception inside a waiting task, and run does not raise" do
      error = EvixSpecError.new("boom")
      failing = ev.spawn do
        ev.sleep(0.01)
        raise error
      end
      caught = nil
      ev.spawn do
        failing.wait
      rescue EvixSpecError => e
        caught = e
      end
      expect { ev.run }.not_to raise_error
      expect(caught).to equal(error)
      expect(failing.alive?).to be(false)
      expect { failing.wait }.to raise_error(error)
    end

    it "raises the task's own exception with the task's backtrace from outside run" do
      line = nil
      task = ev.spawn do
        ev.sleep(0.01)
        line = __LINE__ + 1
        raise EvixSpecError, "outside"
      end
      expect { task.wait }.to raise_error(EvixSpecError, "outside") { |e|
        expect(backtrace_includes?(e, __FILE__, line)).to be(true)
      }
      expect(task.alive?).to be(false)
    end
  end

  describe "an exception in a task nobody waits on" do
    it "propagates out of run unchanged, and the loop can run again" do
      error = EvixSpecError.new("unwaited")
      line = nil
      ev.spawn do
        ev.sleep(0.01)
        line = __LINE__ + 1
        raise error
      end
      later = ev.spawn do
        ev.sleep(0.05)
        :later
      end
      expect { ev.run }.to raise_error(EvixSpecError) { |e|
        expect(e).to equal(error)
        expect(backtrace_includes?(e, __FILE__, line)).to be(true)
      }
      ev.run
      expect(later.wait).to eq(:later)
    end

    it "propagates out of run_once too" do
      ev.spawn { raise EvixSpecError, "once" }
      expect { ev.run_once }.to raise_error(EvixSpecError, "once")
    end
  end

  describe "#cancel" do
    it "never runs a pending task; wait raises Evix::CancelledError" do
      ran = false
      task = ev.spawn { ran = true }
      expect(task.cancel).to be_nil
      expect(task.alive?).to be(false)
      expect { ev.run }.not_to raise_error
      expect(ran).to be(false)
      expect { task.wait }.to raise_error(Evix::CancelledError)
      expect(Evix::CancelledError.ancestors).to include(Evix::Error)
    end

    it "raises Evix::CancelledError in a sleeping task and runs its ensure blocks", timing: true do
      log = []
      task = ev.spawn do
        log << :started
        ev.sleep(1)
        log << :slept_through
      rescue Evix::CancelledError
        log << :rescued
        raise
      ensure
        log << :ensure
      end
      ev.spawn do
        ev.sleep(0.02)
        task.cancel
      end
      expect(elapsed { ev.run }).to be < 0.5 # the cancelled sleep's timer is gone too
      expect(log).to eq(%i[started rescued ensure])
      expect(task.alive?).to be(false)
      expect { task.wait }.to raise_error(Evix::CancelledError)
      expect(ev.stats[:timers]).to eq(0)
    end

    it "cancels a suspended task from outside run", timing: true do
      ensured = false
      task = ev.spawn do
        ev.sleep(5)
      ensure
        ensured = true
      end
      ev.run_once(0) # the task starts and suspends in sleep
      expect(task.alive?).to be(true)
      task.cancel
      expect(ensured).to be(true)
      expect(task.alive?).to be(false)
      expect(elapsed { ev.run }).to be < 0.5
      expect { task.wait }.to raise_error(Evix::CancelledError, /cancel/)
    end

    # The one example here that waits on I/O: once per backend.
    on_each_backend do
      it "cancels a task suspended on IO; data arriving later does not resume it" do
        r, w = socket_pair
        io = ev.wrap(r)
        ensured = false
        got = :nothing
        task = ev.spawn do
          got = io.read
        ensure
          ensured = true
        end
        ev.spawn do
          ev.sleep(0.02)
          task.cancel
          w.write("late data")
          ev.sleep(0.05)
        end
        expect { ev.run }.not_to raise_error
        expect(ensured).to be(true)
        expect(got).to eq(:nothing)
        expect(ev.stats[:watchers]).to eq(0)
        expect(r.read_nonblock(100)).to eq("late data")
      end
    end

    it "cancels a task that waits on another task; the other one finishing later does not disturb it", timing: true do
      slow = ev.spawn do
        ev.sleep(0.05)
        :slow
      end
      waiter = ev.spawn { slow.wait }
      ev.spawn do
        ev.sleep(0.01)
        waiter.cancel
      end
      expect { ev.run }.not_to raise_error
      expect { waiter.wait }.to raise_error(Evix::CancelledError)
      expect(slow.wait).to eq(:slow)
    end

    it "lets a task cancel itself" do
      after = false
      task = ev.spawn do
        described_class.current.cancel
        after = true
      end
      expect { ev.run }.not_to raise_error
      expect(after).to be(false)
      expect { task.wait }.to raise_error(Evix::CancelledError)
    end

    it "wakes a task waiting on the cancelled task with Evix::CancelledError", timing: true do
      sleeper = ev.spawn { ev.sleep(5) }
      outcome = nil
      ev.spawn do
        sleeper.wait
        outcome = :value
      rescue Evix::CancelledError => e
        outcome = e
      end
      ev.spawn do
        ev.sleep(0.01)
        sleeper.cancel
      end
      expect(elapsed { ev.run }).to be < 1
      expect(outcome).to be_a(Evix::CancelledError)
    end

    it "is idempotent and does nothing to a finished task" do
      task = ev.spawn { :done }
      ev.run
      expect(task.cancel).to be_nil
      expect(task.wait).to eq(:done)
      failed = ev.spawn { raise EvixSpecError, "x" }
      expect { ev.run }.to raise_error(EvixSpecError)
      failed.cancel
      expect { failed.wait }.to raise_error(EvixSpecError)
      sleeper = ev.spawn { ev.sleep(5) }
      ev.run_once(0)
      2.times { expect(sleeper.cancel).to be_nil }
      expect { sleeper.wait }.to raise_error(Evix::CancelledError)
    end
  end

  describe "#alive?" do
    it "is true while pending, running and suspended, false once done, failed or cancelled" do
      states = []
      task = ev.spawn do
        states << described_class.current.alive?
        ev.sleep(0.01)
      end
      states << task.alive?
      ev.run_once(0)
      states << task.alive?
      ev.run
      states << task.alive?
      expect(states).to eq([true, true, true, false])

      failed = ev.spawn { raise EvixSpecError, "dead" }
      expect { ev.run }.to raise_error(EvixSpecError)
      expect(failed.alive?).to be(false)
    end
  end

  describe "Evix::Loop#sleep" do
    it "suspends the calling task for about the given time", timing: true do
      took = nil
      ev.spawn { took = elapsed { expect(ev.sleep(0.05)).to be_nil } }
      ev.run
      expect(took).to be >= 0.045
      expect(took).to be < 0.5
    end

    it "lets many tasks sleep at the same time", timing: true do
      done = 0
      took = elapsed do
        50.times do
          ev.spawn do
            ev.sleep(0.1)
            done += 1
          end
        end
        ev.run
      end
      expect(done).to eq(50)
      expect(took).to be < 0.5
    end

    it "accepts 0 and yields to other tasks" do
      log = []
      ev.spawn do
        log << :a1
        ev.sleep(0)
        log << :a2
      end
      ev.spawn { log << :b }
      ev.run
      expect(log).to eq(%i[a1 b a2])
    end

    it "raises Evix::Error outside a task" do
      expect { ev.sleep(0.01) }.to raise_error(Evix::Error, /task/)
    end

    it "raises ArgumentError for a negative time inside a task" do
      task = ev.spawn { ev.sleep(-1) }
      expect { task.wait }.to raise_error(ArgumentError)
    end
  end
end
