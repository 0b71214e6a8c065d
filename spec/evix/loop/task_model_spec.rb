# frozen_string_literal: true

require "spec_helper"

# Tasks (every fiber a loop drives): Evix::Task.current, Task#wait(timeout:),
# Task#cancel(reason) from anywhere, Task#cancelled?, tasks under Evix.run, and waits in
# fibers that user code resumed. Each example notes how it failed before the task model.
RSpec.describe "Evix::Task, one world of tasks" do
  # The outcome of task.wait as a Marshal-able value.
  def outcome_of(task)
    [:value, task.wait]
  rescue Exception => e # rubocop:disable Lint/RescueException -- reported as data
    [:error, e.class.name, e.message]
  end

  describe "Evix::Task.current" do
    # today: nil inside the Evix.run block and inside Fiber.schedule fibers
    it "is a Task inside the Evix.run block and in each Fiber.schedule fiber, nil outside" do
      result = in_child do
        before = Evix::Task.current
        seen = {}
        Evix.run do
          seen[:block] = Evix::Task.current
          Fiber.schedule { seen[:first] = Evix::Task.current }
          Fiber.schedule do
            sleep 0.01
            seen[:second] = Evix::Task.current
          end
          seen[:thread] = Thread.new { Evix::Task.current }.value
        end
        tasks = seen.values_at(:block, :first, :second)
        [before.nil?, tasks.map { |t| t.is_a?(Evix::Task) }, tasks.uniq(&:object_id).size,
         seen[:thread].nil?, Evix::Task.current.nil?]
      end
      expect(result).to eq([true, [true, true, true], 3, true, true])
    end
  end

  describe "#wait(timeout:)" do
    let(:ev) { new_loop }

    # today: ArgumentError (wrong number of arguments, #wait takes none)
    it "raises Evix::TimeoutError from outside run when the task outlasts the timeout; the task keeps running",
       timing: true do
      task = ev.spawn do
        ev.sleep(1)
        :late
      end
      took = elapsed { expect { task.wait(timeout: 0.05) }.to raise_error(Evix::TimeoutError) }
      expect(took).to be_between(0.04, 0.8)
      expect(task.alive?).to be(true)
      expect(task.wait).to eq(:late)
    end

    # today: ArgumentError inside the waiting task, raised out of run
    it "raises Evix::TimeoutError inside another task; the waited task still finishes", timing: true do
      slow = ev.spawn do
        ev.sleep(1)
        :slow
      end
      seen = nil
      ev.spawn do
        t0 = now
        slow.wait(timeout: 0.03)
        seen = :value
      rescue Evix::TimeoutError => e
        seen = [e.class, slow.alive?, now - t0]
      end
      ev.run
      expect(seen[0..1]).to eq([Evix::TimeoutError, true])
      expect(seen[2]).to be < 0.8
      expect(slow.wait).to eq(:slow)
    end

    # today: ArgumentError (wrong number of arguments)
    it "returns the value, re-raises the exception, or raises Evix::CancelledError when done in time" do
      fine = ev.spawn do
        ev.sleep(0.02)
        :fine
      end
      failing = ev.spawn do
        ev.sleep(0.01)
        raise EvixSpecError, "failed"
      end
      cancelled = ev.spawn { ev.sleep(5) }
      results = []
      ev.spawn do
        cancelled.cancel
        begin
          failing.wait(timeout: 2) # waited on before it fails: its exception comes here, not out of run
        rescue EvixSpecError => e
          results << e.message
        end
        results << fine.wait(timeout: 2)
        begin
          cancelled.wait(timeout: 2)
        rescue Evix::CancelledError => e
          results << e.class
        end
      end
      ev.run
      expect(results).to eq(["failed", :fine, Evix::CancelledError])
    end
  end

  describe "#cancel and #cancelled?" do
    let(:ev) { new_loop }

    # today: ArgumentError (#cancel takes no reason)
    it "raises Evix::CancelledError with the reason as its message, in the task and from #wait" do
      inside = nil
      task = ev.spawn do
        ev.sleep(5)
      rescue Evix::CancelledError => e
        inside = e.message
        raise
      end
      ev.spawn do
        ev.sleep(0.01)
        task.cancel("shutting down")
      end
      ev.run
      expect(inside).to eq("shutting down")
      expect { task.wait }.to raise_error(Evix::CancelledError, "shutting down")
    end

    # today: NoMethodError (no #cancelled?)
    it "#cancelled? is true for a cancelled task (pending or suspended), false for a done or failed one" do
      pending_task = ev.spawn { :never }
      pending_task.cancel
      suspended = ev.spawn { ev.sleep(5) }
      done = ev.spawn { :done }
      failed = ev.spawn do
        raise EvixSpecError, "x"
      rescue EvixSpecError
        :rescued
      end
      ev.run_once(0)
      expect(suspended.cancelled?).to be(false)
      suspended.cancel
      ev.run
      expect([pending_task, suspended].map(&:cancelled?)).to eq([true, true])
      expect([done, failed].map(&:cancelled?)).to eq([false, false])
      done.cancel # a no-op on a finished task
      expect(done.cancelled?).to be(false)
      expect(done.wait).to eq(:done)
    end

    # passes today (cancel from another task already runs ensure blocks that wait)
    it "runs the cancelled task's ensure blocks, which may themselves sleep and write", timing: true do
      r, w = socket_pair
      out = ev.wrap(w)
      log = []
      task = ev.spawn do
        ev.sleep(5)
      ensure
        log << :ensure_start
        ev.sleep(0.02)
        out.write("bye")
        log << :ensure_done
      end
      ev.spawn do
        ev.sleep(0.01)
        task.cancel
      end
      expect(elapsed { ev.run }).to be < 1
      expect(log).to eq(%i[ensure_start ensure_done])
      expect(r.read_nonblock(10)).to eq("bye")
      expect { task.wait }.to raise_error(Evix::CancelledError, "task was cancelled")
    end

    # today: Fiber#raise from another thread raises FiberError there; the task sleeps on to its end
    it "cancels a sleeping task from another thread: the loop wakes, ensure runs", timing: true do
      Evix.backends.each do |backend|
        result = in_child do
          ev = Evix::Loop.new(backend: backend)
          log = []
          task = ev.spawn do
            ev.sleep(2)
            log << :slept_through
          rescue Evix::CancelledError => e
            log << e.message
            raise
          ensure
            log << :ensure
          end
          ev.run_once(0)
          Thread.new do
            sleep 0.05
            task.cancel
          rescue StandardError => e
            log << e.class.name
          end
          t0 = now
          ev.run
          [log, now - t0 < 1, outcome_of(task).first(2)]
        end
        expect(result).to eq([["task was cancelled", :ensure], true, [:error, "Evix::CancelledError"]]),
                          "#{backend}: #{result.inspect}"
      end
    end

    # today: the thread's cancel raises FiberError; the task is never cancelled and finishes
    it "cancels from another thread a task that is busy: it gets Evix::CancelledError at its next wait point" do
      Evix.backends.each do |backend|
        result = in_child do
          ev = Evix::Loop.new(backend: backend)
          started = false
          cancel_returned = false
          log = []
          task = ev.spawn do
            started = true
            Thread.pass until cancel_returned # busy: no wait point
            log << :reached_wait
            ev.sleep(0.05) # the first wait point after the cancel
            log << :after_wait
            :finished
          end
          Thread.new do
            Thread.pass until started
            task.cancel
          rescue StandardError => e
            log << e.class.name
          ensure
            cancel_returned = true
          end
          ev.run
          [log, outcome_of(task).first(2)]
        end
        expect(result).to eq([[:reached_wait], [:error, "Evix::CancelledError"]]), "#{backend}: #{result.inspect}"
      end
    end
  end

  describe "Fiber.schedule fibers under Evix.run are tasks" do
    # today: NoMethodError (Task.current is nil in the fiber)
    it "a fiber's task can be waited on from another fiber for its value, with and without a timeout" do
      result = evix_run_in_child do
        task = nil
        Fiber.schedule do
          task = Evix::Task.current
          sleep 0.05
          :fiber_value
        end
        early = begin
          task.wait(timeout: 0.01)
        rescue Evix::TimeoutError => e
          e.class.name
        end
        [early, task.wait, task.alive?]
      end
      expect(result).to eq(["Evix::TimeoutError", :fiber_value, false])
    end

    # today: NoMethodError (Task.current is nil in the fiber)
    it "cancels a fiber from another fiber; its ensure blocks run and may sleep and write" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          r, w = UNIXSocket.pair
          log = []
          task = nil
          Fiber.schedule do
            task = Evix::Task.current
            sleep 2
            log << :slept_through
          rescue Evix::CancelledError => e
            log << e.message
            raise
          ensure
            sleep 0.02
            w.write("bye")
            log << :ensure_done
          end
          Fiber.schedule do
            sleep 0.01
            task.cancel("stop")
          end
          outcome = outcome_of(task)
          [log, outcome, task.cancelled?, r.read_nonblock(10)]
        end
        expect(result).to eq([["stop", :ensure_done], [:error, "Evix::CancelledError", "stop"], true, "bye"]),
                          "#{backend}: #{result.inspect}"
      end
    end

    # today: NoMethodError (Task.current is nil in the fiber); a cross-thread Fiber#raise would not be allowed either
    it "cancels from another thread a fiber blocked in IO#read; its ensure runs" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          r, w = IO.pipe
          log = []
          task = nil
          Fiber.schedule do
            task = Evix::Task.current
            r.read(1) # no data ever comes
            log << :read_returned
          ensure
            log << :ensure
          end
          Thread.new do
            sleep 0.05
            task.cancel
          end
          outcome = outcome_of(task)
          w.close
          [log, outcome.first(2)]
        end
        expect(result).to eq([[:ensure], [:error, "Evix::CancelledError"]]), "#{backend}: #{result.inspect}"
      end
    end

    # today: Evix::Error ("Evix::IO must be used inside a task") and ("must be called inside a task")
    it "lets Evix::IO and loop.sleep work in Fiber.schedule fibers" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          ev = Fiber.scheduler.loop
          a, b = UNIXSocket.pair
          reader = ev.wrap(a)
          writer = ev.wrap(b)
          got = nil
          slept = nil
          Fiber.schedule { got = reader.gets }
          Fiber.schedule do
            t0 = now
            ev.sleep(0.03)
            slept = now - t0
            writer.write("line\n")
          end
          Fiber.schedule { ev.sleep(0.01) } # a second sleeper at the same time
          sleep 0.1
          [got, slept && slept >= 0.025]
        end
        expect(result).to eq(["line\n", true]), "#{backend}: #{result.inspect}"
      end
    end
  end

  describe "a wait inside a fiber that user code resumed goes to the loop" do
    # today: Evix::Error ("Evix::IO must be used inside a task": the Enumerator's fiber is no task)
    it "Enumerator#next over an Evix::IO read inside a loop.spawn task returns the data; other tasks run meanwhile" do
      Evix.backends.each do |backend|
        ev = new_loop(backend)
        r, w = socket_pair
        io = ev.wrap(r)
        ticks = 0
        got = nil
        ev.spawn do
          lines = Enumerator.new { |y| 2.times { y << io.read(5) } }
          got = [lines.next, ticks.positive?]
        end
        ev.spawn do
          5.times do
            ev.sleep(0.01)
            ticks += 1
          end
          w.write("hello")
        end
        ev.run
        expect(got).to eq(["hello", true]), "#{backend}: #{got.inspect}"
      end
    end

    # today: hangs (child killed): the read in the Enumerator's fiber yields back to #next
    # Passes on Ruby 3.3; on 3.1 the io_read hook's Ruby fallback still hangs here.
    it "Enumerator#next over a socket read inside Evix.run returns the data; other fibers run meanwhile",
       **(RUBY_VERSION < "3.3" ? { pending: "hangs on Ruby 3.1 (io_read's Ruby path)" } : {}) do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend, timeout: 3) do
          r, w = UNIXSocket.pair
          ticks = 0
          Fiber.schedule do
            5.times do
              sleep 0.01
              ticks += 1
            end
            w.write("hello")
          end
          reads = Enumerator.new { |y| 2.times { y << r.read(5) } }
          [reads.next, ticks]
        end
        expect(result).to eq(["hello", 5]), "#{backend}: #{result.inspect}"
      end
    end

    # today: #resume returns nil (the read's Fiber.yield goes back to the resumer)
    it "Fiber.new(blocking: false) { sock.read(5) }.resume inside Evix.run returns the data" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend, timeout: 3) do
          r, w = UNIXSocket.pair
          ticks = 0
          Fiber.schedule do
            5.times do
              sleep 0.01
              ticks += 1
            end
            w.write("hello")
          end
          value = Fiber.new(blocking: false) { r.read(5) }.resume
          [value, ticks]
        end
        expect(result).to eq(["hello", 5]), "#{backend}: #{result.inspect}"
      end
    end
  end

  # A task is switched to by transfer, so a user Fiber.yield inside one
  # raises FiberError (as in async 2); a task can still be parked outside
  # any wait of the loop by switching away by hand.
  describe "Scheduler#close and a fiber parked outside any hook" do
    # before the task model: hangs (child killed): close ran the loop until that fiber ended, which it never does
    it "Fiber.set_scheduler(nil) returns while a scheduled fiber is parked outside any hook, and warns naming it" do
      run = run_ruby(<<~RUBY, timeout: 4)
        main = Fiber.current
        Fiber.set_scheduler(Evix::Scheduler.new)
        Fiber.schedule { main.transfer }
        Fiber.set_scheduler(nil)
        puts "closed"
        puts Fiber.scheduler.nil?
      RUBY
      expect(run.timed_out).to be(false)
      expect(run.out).to eq("closed\ntrue\n")
      expect(run.err).to match(/evix: abandoned #<Evix::Task:0x\h+ running #<Fiber:0x\h+/)
      expect(run.status.success?).to be(true)
    end

    # before the task model: hangs (child killed): the run waited for the parked fiber forever
    it "Evix.run returns while one of its fibers is parked outside any hook" do
      run = run_ruby(<<~RUBY, timeout: 4)
        main = Fiber.current
        value = Evix.run do
          Fiber.schedule { main.transfer }
          Fiber.schedule { sleep 0.01 }
          :block_value
        end
        p value
      RUBY
      expect(run.timed_out).to be(false)
      expect(run.out).to eq(":block_value\n")
      expect(run.err).to include("evix: abandoned")
      expect(run.status.success?).to be(true)
    end

    it "raises a user Fiber.yield inside a scheduled fiber as FiberError out of Evix.run" do
      run = run_ruby(<<~RUBY, timeout: 4)
        begin
          Evix.run { Fiber.schedule { Fiber.yield } }
        rescue FiberError => e
          puts e.message
        end
      RUBY
      expect(run.timed_out).to be(false)
      expect(run.out).to match(/not resumed fiber/)
    end
  end
end
