# frozen_string_literal: true

require "spec_helper"

# Evix.run: sets an Evix::Scheduler, runs the block in a fiber, runs the loop
# until every fiber finished and returns the block's value.
RSpec.describe "Evix.run" do
  # The least a Fiber::Scheduler needs for Fiber.set_scheduler to accept it.
  let(:other_scheduler_class) do
    Class.new do
      def block(_blocker, _timeout = nil) = false
      def unblock(_blocker, _fiber) = nil
      def kernel_sleep(_duration = nil) = nil
      def io_wait(_io, _events, _timeout = nil) = false
      def fiber(&) = Fiber.new(blocking: false, &).tap(&:resume)
      def close = nil
    end
  end

  # One Evix.run that touches what a run creates: a loop, timers, IO
  # watchers, offload pool threads.
  def busy_run
    r, w = IO.pipe
    Evix.run do
      Fiber.schedule do
        sleep 0.01
        w.write("x")
      end
      Evix.offload { :offloaded }
      r.read(1)
    ensure
      r.close
      w.close
    end
  end

  it "returns the block's value" do
    expect(Evix.run { 6 * 7 }).to eq(42)
  end

  it "runs the block in a non-blocking fiber under an Evix::Scheduler set only for the run" do
    main = Fiber.current
    seen = Evix.run { [Fiber.scheduler, Fiber.current.blocking?, Fiber.current.equal?(main)] }
    expect(seen[0]).to be_a(Evix::Scheduler)
    expect(seen[1]).to be(false)
    expect(seen[2]).to be(false)
    expect(Fiber.scheduler).to be_nil
  end

  it "closes the scheduler's loop when it returns" do
    evloop = Evix.run { Fiber.scheduler.loop }
    expect(evloop).to be_a(Evix::Loop)
    expect(evloop).to be_closed
  end

  it "returns only once every fiber the block scheduled has finished" do
    log = []
    value = Evix.run do
      Fiber.schedule do
        sleep 0.05
        log << :child
      end
      log << :block
      :value
    end
    expect(value).to eq(:value)
    expect(log).to eq(%i[block child])
  end

  it "raises ArgumentError without a block" do
    expect { Evix.run }.to raise_error(ArgumentError, /block/)
    expect(Fiber.scheduler).to be_nil
  end

  describe "exceptions" do
    it "raises the block's exception and leaves no scheduler behind" do
      expect { Evix.run { raise EvixSpecError, "from the block" } }.to raise_error(EvixSpecError, "from the block")
      expect(Fiber.scheduler).to be_nil
    end

    it "raises the exception of a scheduled fiber that fails before its first wait" do
      expect do
        Evix.run { Fiber.schedule { raise EvixSpecError, "at once" } }
      end.to raise_error(EvixSpecError, "at once")
      expect(Fiber.scheduler).to be_nil
    end

    it "raises the exception of a scheduled fiber that fails after a wait" do
      expect do
        Evix.run do
          Fiber.schedule do
            sleep 0.01
            raise EvixSpecError, "later"
          end
          sleep 0.05
        end
      end.to raise_error(EvixSpecError, "later")
      expect(Fiber.scheduler).to be_nil
    end

    it "raises a scheduled fiber's exception even while another fiber still waits on a pipe that stays empty" do
      result = in_child do
        r, = IO.pipe
        Evix.run do
          Fiber.schedule { r.read(1) } # never gets data
          Fiber.schedule do
            sleep 0.02
            raise EvixSpecError, "boom"
          end
          :block_done
        end
      end
      expect(result).to eq([:error, "EvixSpecError", "boom"])
    end

    it "lets an exception raised into its thread (Timeout, Thread#raise) out while fibers still wait" do
      result = in_child do
        r, _w = IO.pipe # _w keeps the write end referenced: a collected one closes, and the read sees EOF
        main = Thread.current
        Thread.new do
          sleep 0.1
          main.raise(EvixSpecError, "from outside")
        end
        Evix.run { r.read(1) } # never gets data
      end
      expect(result).to eq([:error, "EvixSpecError", "from outside"])
    end
  end

  describe "signals and exit" do
    it "ends at once when a fiber the block scheduled raises a signal exception while others still wait" do
      [Interrupt, SignalException.new("TERM")].each do |signal|
        result = in_child do
          r, = IO.pipe
          Evix.run do
            Fiber.schedule { r.read(1) } # never gets data
            Fiber.schedule { raise signal } # starts inside the block, like a handler fiber
            :block_done
          end
        end
        expect(result.first(2)).to eq([:error, signal.is_a?(Class) ? signal.name : signal.class.name])
      end
    end

    it "ends at once on exit from a fiber while another fiber waits" do
      result = in_child do
        r, = IO.pipe
        Evix.run do
          Fiber.schedule { r.read(1) }
          Fiber.schedule do
            sleep 0.01
            exit 3
          end
          r.read(1)
        end
      end
      expect(result).to eq([:error, "SystemExit", "exit"])
    end

    it "dies of a real SIGTERM that arrives while fibers run, like a server in accept" do
      pid = fork do
        server = TCPServer.new("127.0.0.1", 0)
        Evix.run do
          Fiber.schedule { server.accept } # never gets a client
          20.times { |i| Fiber.schedule { sleep(0.001 * i) while true } } # rubocop:disable Style/InfiniteLoop
          Fiber.schedule do
            sleep 0.05
            Process.kill(:TERM, Process.pid)
          end
        end
        exit!(0)
      end
      status = wait_child(pid, timeout: 5)
      expect(status.termsig).to eq(Signal.list.fetch("TERM"))
    end
  end

  describe "another scheduler" do
    it "raises Evix::Error when a different scheduler is set on the thread, and leaves it set" do
      other = other_scheduler_class.new
      Fiber.set_scheduler(other)
      ran = false
      expect { Evix.run { ran = true } }.to raise_error(Evix::Error, /scheduler/)
      expect(ran).to be(false)
      expect(Fiber.scheduler).to equal(other)
    ensure
      Fiber.set_scheduler(nil)
    end

    it "raises Evix::Error from the main fiber while an Evix::Scheduler is set directly" do
      scheduler = Evix::Scheduler.new
      Fiber.set_scheduler(scheduler)
      expect { Evix.run { :never } }.to raise_error(Evix::Error)
      expect(Fiber.scheduler).to equal(scheduler)
    ensure
      Fiber.set_scheduler(nil)
    end
  end

  describe "nesting" do
    it "returns the inner block's value to the calling fiber" do
      result = Evix.run { [:outer, Evix.run { :inner }] }
      expect(result).to eq(%i[outer inner])
    end

    it "runs the inner block in a new fiber of the same scheduler" do
      seen = Evix.run do
        outer_fiber = Fiber.current
        outer_scheduler = Fiber.scheduler
        Evix.run do
          [Fiber.current.equal?(outer_fiber), Fiber.scheduler.equal?(outer_scheduler), Fiber.current.blocking?]
        end
      end
      expect(seen).to eq([false, true, false])
    end

    it "keeps the other fibers running while the inner block waits", timing: true do
      ticks = 0
      done = false
      inner = Evix.run do
        Fiber.schedule do
          until done
            ticks += 1
            sleep 0.01
          end
        end
        value = Evix.run do
          sleep 0.3
          :slept
        end
        done = true
        value
      end
      expect(inner).to eq(:slept)
      expect(ticks).to be >= 5
    end

    it "raises the inner block's exception at the inner call only" do
      log = []
      result = Evix.run do
        begin
          Evix.run do
            sleep 0.01
            raise EvixSpecError, "inner"
          end
        rescue EvixSpecError => e
          log << e.message
        end
        sleep 0.01
        :outer_finished
      end
      expect(result).to eq(:outer_finished)
      expect(log).to eq(["inner"])
      expect(Fiber.scheduler).to be_nil
    end

    it "nests from inside a scheduled fiber and several levels deep" do
      values = []
      Evix.run do
        Fiber.schedule do
          values << Evix.run do
            sleep 0.01
            Evix.run { Evix.run { :deep } }
          end
        end
      end
      expect(values).to eq([:deep])
    end
  end

  describe "leaving nothing behind" do
    it "runs twice in a row and leaves no scheduler and no file descriptor behind" do
      busy_run # the offload pool's threads start lazily and hold no fds
      before = fd_count
      expect(busy_run).to eq("x")
      expect(Fiber.scheduler).to be_nil
      expect(busy_run).to eq("x")
      expect(Fiber.scheduler).to be_nil
      expect(fd_count).to eq(before)
    end

    it "leaves no scheduler and no file descriptor behind after its block raised" do
      busy_run
      before = fd_count
      expect do
        Evix.run do
          sleep 0.01
          raise EvixSpecError
        end
      end.to raise_error(EvixSpecError)
      expect(Fiber.scheduler).to be_nil
      expect(fd_count).to eq(before)
    end

    it "works inside a thread with its own loop and leaves no scheduler or fd behind" do
      busy_run
      before = fd_count
      thread = helper_thread do
        value = busy_run
        [value, Fiber.scheduler, busy_run]
      end
      expect(thread.value).to eq(["x", nil, "x"])
      expect(Fiber.scheduler).to be_nil
      expect(fd_count).to eq(before)
    end

    it "runs in two threads at once, each on its own scheduler and loop", timing: true do
      ready = Thread::Queue.new
      go = Thread::Queue.new
      threads = Array.new(2) do
        helper_thread do
          Evix.run do
            ready << true
            go.pop
            started = now
            sleep 0.1
            [Fiber.scheduler.object_id, Fiber.scheduler.loop.object_id, started, now]
          end
        end
      end
      2.times { ready.pop }
      2.times { go << true }
      runs = threads.map(&:value)
      expect(runs.map(&:first).uniq.size).to eq(2)
      expect(runs.map { |run| run[1] }.uniq.size).to eq(2)
      first, second = runs
      expect(first[2] < second[3] && second[2] < first[3]).to be(true) # the sleeps overlapped
    end

    it "runs in a thread while the main thread runs its own" do
      thread = helper_thread do
        Evix.run do
          sleep 0.05
          :thread
        end
      end
      main = Evix.run do
        sleep 0.05
        :main
      end
      expect(main).to eq(:main)
      expect(thread.value).to eq(:thread)
    end
  end
end
