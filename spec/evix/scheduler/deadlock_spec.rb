# frozen_string_literal: true

require "spec_helper"

# Waits that nothing can end: a wake-up another thread sends before the
# fiber has blocked, a fiber parked for good at thread exit, and the
# deadlock check of Evix.run and Scheduler#close (tasks parked in the loop
# with nothing that could wake them end the run with an Evix::Error naming
# them instead of hanging).
RSpec.describe Evix::Scheduler, "deadlocks and lost wake-ups" do
  # A scheduler whose block releases the GVL before it parks (as a
  # subclass's hook that sleeps in a blocking fiber does): the +gate+ runs
  # there, in a blocking fiber.
  def gated_scheduler_class
    Class.new(Evix::Scheduler) do
      attr_accessor :gate

      def block(blocker, timeout = nil)
        gate = self.gate
        Fiber.new(blocking: true) { gate.call }.resume if gate
        super
      end
    end
  end

  describe "an unblock from another thread before the fiber blocks" do
    # Before the fix: hangs (child killed): the unblock found no blocked fiber
    # and was dropped; Queue#pop then parked for ever.
    it "is kept: the fiber's next block returns at once and it takes the item" do
      result = in_child(timeout: 5) do
        queue = Thread::Queue.new
        arrived = Thread::Queue.new
        pushed = Thread::Queue.new
        pusher = Thread.new do
          arrived.pop
          queue.push(:item) # unblocks the fiber, which is in Queue#pop but not parked yet
          pushed.push(true)
        end
        scheduler = gated_scheduler_class.new
        scheduler.gate = lambda {
          arrived.push(true)
          pushed.pop
          scheduler.gate = nil
        }
        Fiber.set_scheduler(scheduler)
        got = nil
        Fiber.schedule { got = queue.pop }
        Fiber.set_scheduler(nil)
        pusher.join
        got
      end
      expect(result).to eq(:item)
    end

    # Ruby's test/fiber test_deadlock: a kernel_sleep that sleeps in a
    # blocking fiber before it blocks, and a ConditionVariable signalled
    # every 0.1 ms by another thread. Before the fix: hangs at the first wait.
    it "never loses a ConditionVariable signal sent while kernel_sleep is in a blocking region" do
      result = in_child(timeout: 10) do
        sleepy = Class.new(Evix::Scheduler) do
          def kernel_sleep(duration = nil)
            Fiber.new(blocking: true) { sleep 0.0001 }.resume
            block(:sleep, duration)
            true
          end
        end
        mutex = Thread::Mutex.new
        condition = Thread::ConditionVariable.new
        signaller = Thread.new do
          loop do
            mutex.synchronize { condition.signal }
            sleep 0.0001
          end
        end
        rounds = 0
        Thread.new do
          Fiber.set_scheduler(sleepy.new)
          Fiber.schedule do
            10.times do
              mutex.synchronize do
                condition.wait(mutex)
                sleep 0.0001
                rounds += 1
              end
            end
          end
        end.join
        signaller.kill
        rounds
      end
      expect(result).to eq(10)
    end
  end

  describe "deadlock detection" do
    it "raises Evix::Error at once when a task waits for itself" do
      outcome = in_child(timeout: 5) { capture { Evix.run { Evix::Task.current.wait } } }
      expect(outcome).to match([:raised, "Evix::Error", /a task cannot wait for itself/])
    end

    # Before: hangs (child killed): the run polled for ever for a wake-up
    # nothing could send.
    it "ends Evix.run with an Evix::Error naming two tasks that wait on each other, and where each waits" do
      outcome = in_child(timeout: 5) do
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        ensured = []
        error = capture do
          Evix.run do
            tasks = []
            scheduler = Fiber.scheduler
            a = scheduler.spawn do
              Fiber.scheduler.loop.sleep(0.01)
              tasks[1].wait # line A
            ensure
              ensured << :a
            end
            b = scheduler.spawn do
              Fiber.scheduler.loop.sleep(0.01)
              tasks[0].wait # line B
            ensure
              ensured << :b
            end
            tasks.push(a, b)
            nil
          end
        end
        [error, ensured.sort, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
      end
      (kind, klass, message), ensured, took = outcome
      expect([kind, klass]).to eq([:raised, "Evix::Error"])
      expect(message).to match(/deadlock: 2 task\(s\) wait/)
      expect(message.scan(/#<Evix::Task:0x\h+ running .*waits at .*deadlock_spec\.rb:\d+/).size).to eq(2)
      expect(ensured).to eq(%i[a b]) # cancelled: their ensure blocks ran
      expect(took).to be < 2
    end

    it "ends Evix.run with an Evix::Error when a fiber pops a Thread::Queue no other thread can push to" do
      outcome = in_child(timeout: 5) { capture { Evix.run { Thread::Queue.new.pop } } }
      expect(outcome).to match([:raised, "Evix::Error", /deadlock: 1 task\(s\) wait.*\n.*waits at .*_spec\.rb/])
    end

    it "is no deadlock while another thread lives that may push to the Thread::Queue" do
      outcome = in_child(timeout: 5) do
        queue = Thread::Queue.new
        pusher = Thread.new do
          sleep 0.3
          queue.push(:late)
        end
        value = Evix.run { queue.pop }
        pusher.join
        value
      end
      expect(outcome).to eq(:late)
    end

    # A signal block's watcher is unref'd (it does not keep a run going), but
    # it may still wake a task.
    it "is no deadlock while the loop has a signal block that may wake the task" do
      outcome = in_child(timeout: 5) do
        Evix.run do
          queue = Evix::Queue.new
          Fiber.scheduler.loop.add_signal(:USR2) { queue.push(:signalled) }
          Thread.new do
            sleep 0.3
            Process.kill(:USR2, Process.pid)
          end
          queue.pop
        end
      end
      expect(outcome).to eq(:signalled)
    end

    it "is no deadlock while an offload job is out (the job's hold), nor while a fiber sleeps for ever" do
      outcome = in_child(timeout: 5) do
        offloaded = Evix.run do
          waiter = Fiber.scheduler.spawn { Evix.offload { sleep 0.2 } && :done }
          waiter.wait
        end
        main = Thread.current
        Thread.new do
          sleep 0.3
          main.raise(Interrupt)
        end
        slept = capture { Evix.run { sleep } }
        [offloaded, slept.first(2)]
      end
      expect(outcome).to eq([:done, [:raised, "Interrupt"]])
    end

    # test_mutex_deadlock of Ruby's test/fiber: a fiber parks for good
    # holding a Mutex, and Ruby closes the scheduler as the thread ends.
    # Before: hangs (child killed) in close.
    it "ends a scheduler's close at thread exit with an Evix::Error when a fiber holding a Mutex is parked for good" do
      outcome = in_child(timeout: 5) do
        mutex = Thread::Mutex.new
        thread = Thread.new do
          Thread.current.report_on_exception = false
          scheduler = Evix::Scheduler.new
          Fiber.set_scheduler(scheduler)
          Fiber.schedule { mutex.synchronize { scheduler.loop.suspend } }
          :thread_value
        end
        [capture { thread.value }, mutex.locked?]
      end
      error, locked = outcome
      expect(error).to match([:raised, "Evix::Error", /deadlock: 1 task\(s\) wait.*\n.*waits at .*_spec\.rb/])
      expect(locked).to be(false) # the parked fiber was cancelled: synchronize let go
    end

    # Ruby 3.1 does not close the scheduler of a thread that ends with an
    # exception; 3.3 and 3.4 do, with that exception in $!. Before: the
    # deadlock error replaced the thread's own exception (test_mutex_deadlock
    # on 3.4 saw no ThreadError).
    it "keeps the exception that ends the thread, with the deadlock in its #suppressed", if: RUBY_VERSION >= "3.3" do
      outcome = in_child(timeout: 5) do
        thread = Thread.new do
          Thread.current.report_on_exception = false
          scheduler = Evix::Scheduler.new
          Fiber.set_scheduler(scheduler)
          Fiber.schedule { scheduler.loop.suspend }
          raise ArgumentError, "the thread's own"
        end
        begin
          thread.join
        rescue ArgumentError => e
          [e.message, e.suppressed.map { |s| [s.class.name, s.message[/deadlock: 1 task/]] }]
        end
      end
      expect(outcome).to eq(["the thread's own", [["Evix::Error", "deadlock: 1 task"]]])
    end

    it "makes Scheduler#close raise Evix::Error naming a fiber parked for good, at once" do
      outcome = in_child(timeout: 5) do
        scheduler = Evix::Scheduler.new
        Fiber.set_scheduler(scheduler)
        Fiber.schedule { scheduler.loop.suspend }
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        error = capture { scheduler.close }
        [error, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, Fiber.scheduler.nil?]
      end
      error, took, unset = outcome
      expect(error).to match([:raised, "Evix::Error", /deadlock: 1 task\(s\) wait.*\n  #<Evix::Task.*waits at /])
      expect(took).to be < 2
      expect(unset).to be(true)
    end
  end
end
