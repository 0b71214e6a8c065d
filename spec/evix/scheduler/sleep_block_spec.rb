# frozen_string_literal: true

require "spec_helper"

# Evix::Scheduler: fibers that sleep, time out and wait on each other or on
# plain threads (the kernel_sleep, timeout_after, block and unblock hooks).
RSpec.describe Evix::Scheduler, "sleeping and blocking" do
  include EvixSchedulerHelpers

  describe "Kernel#sleep" do
    it "runs 100 fibers that each sleep 0.05 s concurrently, in well under a second", timing: true do
      finished = 0
      took = elapsed do
        Evix.run do
          100.times do
            Fiber.schedule do
              sleep 0.05
              finished += 1
            end
          end
        end
      end
      expect(finished).to eq(100)
      expect(took).to be_between(0.045, 0.5)
    end

    # Kernel#sleep counts whole seconds of time(2), which on Linux reads the
    # coarse realtime clock: it can lag Time.now by a tick, so the bounds must
    # come from the same clock.
    it "returns the whole seconds slept, like Kernel#sleep without a scheduler" do
      before = Process.clock_gettime(Process::CLOCK_REALTIME_COARSE, :second)
      slept = Evix.run { sleep 0.02 }
      after = Process.clock_gettime(Process::CLOCK_REALTIME_COARSE, :second)
      expect(slept).to be_an(Integer).and(be_between(0, after - before))
    end

    it "interleaves fibers at their sleeps", timing: true do
      log = []
      Evix.run do
        Fiber.schedule do
          log << :a1
          sleep 0.1
          log << :a2
        end
        Fiber.schedule do
          log << :b1
          sleep 0.02
          log << :b2
        end
      end
      expect(log).to eq(%i[a1 b1 b2 a2])
    end
  end

  describe "Timeout.timeout" do
    it "raises Timeout::Error in about the timeout, and the loop keeps working afterwards", timing: true do
      result = Evix.run do
        error = nil
        took = elapsed do
          Timeout.timeout(0.05) { sleep 1 }
        rescue Timeout::Error => e
          error = e
        end
        sleep 0.01
        other = nil
        Fiber.schedule do
          sleep 0.01
          other = :ran
        end
        sleep 0.03
        [error, took, other]
      end
      error, took, other = result
      expect(error).to be_a(Timeout::Error)
      expect(took).to be_between(0.045, 0.4)
      expect(other).to eq(:ran)
    end

    it "does not block the other fibers while it waits", timing: true do
      state = {}
      error = Evix.run do
        start_ticker(state)
        Timeout.timeout(0.3) { sleep 1 }
      rescue Timeout::Error => e
        e
      ensure
        state[:done] = true
      end
      expect(error).to be_a(Timeout::Error)
      expect(state[:ticks]).to be >= 5
    end

    it "raises the given exception class with the given message" do
      expect do
        Evix.run { Timeout.timeout(0.02, EvixSpecError, "too slow") { sleep 1 } }
      end.to raise_error(EvixSpecError, "too slow")
    end

    it "returns the block's value and never fires later when the block finishes in time", timing: true do
      result = Evix.run do
        value = Timeout.timeout(0.05) do
          sleep 0.01
          :in_time
        end
        sleep 0.1 # past the original deadline
        value
      end
      expect(result).to eq(:in_time)
    end

    it "interrupts a read on a pipe, and the same fiber can read the pipe afterwards" do
      r, w = pipe
      result = Evix.run do
        error = begin
          Timeout.timeout(0.05) { r.read(3) }
        rescue Timeout::Error => e
          e
        end
        Fiber.schedule do
          sleep 0.02
          w.write("abc")
        end
        [error, r.read(3)]
      end
      expect(result[0]).to be_a(Timeout::Error)
      expect(result[1]).to eq("abc")
    end
  end

  describe "Queue, Mutex and ConditionVariable between fibers" do
    it "passes values through a Thread::Queue in order, the consumer waiting on pop" do
      queue = Thread::Queue.new
      received = []
      Evix.run do
        Fiber.schedule { 3.times { received << queue.pop } }
        %i[a b c].each do |item|
          sleep 0.01
          queue << item
        end
      end
      expect(received).to eq(%i[a b c])
    end

    it "makes a producer wait on a full SizedQueue until the consumer pops" do
      queue = Thread::SizedQueue.new(1)
      log = []
      Evix.run do
        Fiber.schedule do
          3.times do |i|
            queue.push(i)
            log << [:pushed, i]
          end
        end
        3.times do
          sleep 0.01
          log << [:popped, queue.pop]
        end
      end
      expect(log).to eq([[:pushed, 0], [:popped, 0], [:pushed, 1], [:popped, 1], [:pushed, 2], [:popped, 2]])
    end

    it "serialises fibers on a Mutex held across a sleep" do
      mutex = Mutex.new
      log = []
      Evix.run do
        2.times do |i|
          Fiber.schedule do
            mutex.synchronize do
              log << [:in, i]
              sleep 0.02
              log << [:out, i]
            end
          end
        end
      end
      expect(log).to eq([[:in, 0], [:out, 0], [:in, 1], [:out, 1]])
    end

    it "wakes a fiber waiting on a ConditionVariable when another fiber signals" do
      mutex = Mutex.new
      cond = ConditionVariable.new
      ready = false
      log = []
      Evix.run do
        Fiber.schedule do
          mutex.synchronize do
            cond.wait(mutex) until ready
            log << :woken
          end
        end
        sleep 0.02
        mutex.synchronize do
          ready = true
          log << :signal
          cond.signal
        end
      end
      expect(log).to eq(%i[signal woken])
    end

    it "returns nil from a ConditionVariable#wait with a timeout that passes", timing: true do
      mutex = Mutex.new
      cond = ConditionVariable.new
      took = nil
      Evix.run { took = elapsed { mutex.synchronize { cond.wait(mutex, 0.05) } } }
      expect(took).to be_between(0.045, 0.4)
    end
  end

  describe "Queue, Mutex, ConditionVariable and Thread#join between a fiber and a plain thread" do
    it "wakes a fiber blocked on Queue#pop promptly when another thread pushes", timing: true do
      queue = Thread::Queue.new
      helper_thread do
        sleep 0.1
        queue << :from_thread
      end
      value = nil
      took = elapsed { Evix.run { value = queue.pop } }
      expect(value).to eq(:from_thread)
      expect(took).to be_between(0.09, 0.5) # the scheduler's idle poll is 1 s
    end

    it "wakes a fiber blocked on a Mutex promptly when the owning thread unlocks it", timing: true do
      mutex = Mutex.new
      locked = Thread::Queue.new
      helper_thread do
        mutex.lock
        locked << true
        sleep 0.1
        mutex.unlock
      end
      took = nil
      Evix.run do
        locked.pop
        took = elapsed { mutex.synchronize { :got_it } }
      end
      expect(took).to be_between(0.05, 0.5)
      expect(mutex).not_to be_locked
    end

    it "wakes a fiber waiting on a ConditionVariable promptly when a thread signals", timing: true do
      mutex = Mutex.new
      cond = ConditionVariable.new
      ready = false
      helper_thread do
        sleep 0.1
        mutex.synchronize do
          ready = true
          cond.signal
        end
      end
      took = elapsed { Evix.run { mutex.synchronize { cond.wait(mutex, 3) until ready } } }
      expect(ready).to be(true)
      expect(took).to be_between(0.09, 0.5)
    end

    it "lets a thread wait on a Queue that a fiber fills" do
      queue = Thread::Queue.new
      consumer = helper_thread { Array.new(3) { queue.pop } }
      Evix.run do
        3.times do |i|
          sleep 0.01
          queue << i
        end
      end
      expect(consumer.value).to eq([0, 1, 2])
    end

    it "joins a thread from a fiber while other fibers keep running", timing: true do
      state = {}
      thread = helper_thread do
        sleep 0.3
        42
      end
      value = Evix.run do
        start_ticker(state)
        thread.value
      ensure
        state[:done] = true
      end
      expect(value).to eq(42)
      expect(state[:ticks]).to be >= 5
    end
  end

  describe "kernel_sleep, block and unblock called directly" do
    it "kernel_sleep suspends the fiber for the duration and returns nil", timing: true do
      result = nil
      took = elapsed { Evix.run { result = Fiber.scheduler.kernel_sleep(0.05) } }
      expect(result).to be_nil
      expect(took).to be_between(0.045, 0.4)
    end

    it "kernel_sleep without a duration sleeps until unblock" do
      log = []
      Evix.run do
        sleeper = Fiber.schedule do
          sleep
          log << :woken
        end
        sleep 0.03
        log << :unblocking
        Fiber.scheduler.unblock(:sleep, sleeper)
      end
      expect(log).to eq(%i[unblocking woken])
    end

    it "block returns false when its timeout passes first", timing: true do
      result = nil
      took = elapsed { Evix.run { result = Fiber.scheduler.block(:spec, 0.05) } }
      expect(result).to be(false)
      expect(took).to be_between(0.045, 0.4)
    end

    it "block returns true when another fiber unblocks it" do
      result = nil
      Evix.run do
        waiter = Fiber.schedule { result = Fiber.scheduler.block(:spec, 2) }
        sleep 0.02
        Fiber.scheduler.unblock(:spec, waiter)
      end
      expect(result).to be(true)
    end

    it "unblock from the loop's own callback resumes the fiber after the callback, once" do
      log = []
      Evix.run do
        scheduler = Fiber.scheduler
        waiter = Fiber.schedule { log << [:woken, scheduler.block(:spec, 2)] }
        scheduler.loop.add_timer(0.01) do
          scheduler.unblock(:spec, waiter)
          scheduler.unblock(:spec, waiter) # the second finds nothing blocked
          log << :callback_done
        end
      end
      expect(log).to eq([:callback_done, [:woken, true]])
    end

    it "unblock of a fiber that is not blocked (or not a fiber) changes nothing" do
      log = []
      Evix.run do
        scheduler = Fiber.scheduler
        Fiber.schedule { log << [:slept, scheduler.block(:spec, 0.05)] }
        runner = Fiber.schedule { log << :ran }
        expect(scheduler.unblock(:spec, runner)).to be_nil
        expect(scheduler.unblock(:spec, :not_a_fiber)).to be_nil
      end
      expect(log).to eq([:ran, [:slept, false]])
    end

    it "unblock from another thread wakes a blocked loop promptly", timing: true do
      result = nil
      took = elapsed do
        Evix.run do
          scheduler = Fiber.scheduler
          fiber = Fiber.current
          helper_thread do
            sleep 0.1
            scheduler.unblock(:spec, fiber)
          end
          result = scheduler.block(:spec, nil)
        end
      end
      expect(result).to be(true)
      expect(took).to be_between(0.09, 0.5) # the scheduler's idle poll is 1 s
    end
  end

  # Ruby's own primitives under Evix.run: these pass today (the scheduler's block and
  # unblock hooks); they guard the rewrite of the waiting model.
  describe "Ruby's Queue, Mutex and ConditionVariable under Evix.run" do
    it "Queue carries items between fibers and from another thread, while other fibers keep running",
       timing: true do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          queue = Thread::Queue.new
          got = []
          ticks = 0
          consumer = Fiber.schedule { 4.times { got << queue.pop } }
          Fiber.schedule do
            2.times do |i|
              sleep 0.01
              queue << [:fiber, i]
            end
          end
          Thread.new do
            sleep 0.05
            2.times { |i| queue << [:thread, i] }
          end
          while consumer.alive?
            sleep 0.005
            ticks += 1
          end
          [got, ticks >= 3]
        end
        expect(result).to eq([[[:fiber, 0], [:fiber, 1], [:thread, 0], [:thread, 1]], true]),
                          "#{backend}: #{result.inspect}"
      end
    end

    it "Mutex serialises fibers that sleep while holding it, and a thread waiting for it" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          mutex = Thread::Mutex.new
          log = []
          fibers = Array.new(3) do |i|
            Fiber.schedule do
              mutex.synchronize do
                log << [:in, i]
                sleep 0.01
                log << [:out, i]
              end
            end
          end
          thread = Thread.new do
            sleep 0.005
            mutex.synchronize { log << %i[thread in] }
          end
          sleep 0.005 while fibers.any?(&:alive?)
          thread.join
          # every fiber's [:in, i] is followed at once by its [:out, i]: nobody got in between
          held = log.each_index.select { |k| log[k][0] == :in }.all? { |k| log[k + 1] == [:out, log[k][1]] }
          [held, log.size]
        end
        expect(result).to eq([true, 7]), "#{backend}: #{result.inspect}"
      end
    end

    it "ConditionVariable wakes a fiber signalled by another fiber and by another thread" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          mutex = Thread::Mutex.new
          cv = Thread::ConditionVariable.new
          ready = []
          got = []
          waiter = Fiber.schedule do
            mutex.synchronize do
              cv.wait(mutex) while ready.empty?
              got << ready.shift
              cv.wait(mutex) while ready.empty?
              got << ready.shift
            end
          end
          Fiber.schedule do
            sleep 0.01
            mutex.synchronize do
              ready << :from_fiber
              cv.signal
            end
          end
          Thread.new do
            sleep 0.05
            mutex.synchronize do
              ready << :from_thread
              cv.signal
            end
          end
          sleep 0.005 while waiter.alive?
          got
        end
        expect(result).to eq(%i[from_fiber from_thread]), "#{backend}: #{result.inspect}"
      end
    end
  end
end
