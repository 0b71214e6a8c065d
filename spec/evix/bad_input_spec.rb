# frozen_string_literal: true

require "spec_helper"

# Bad input and hangs (docs/architecture.md, "Failure and cancellation":
# input sizes are bounded before allocation). What can abort, hang or leave global state
# behind runs in a child process with a deadline.
RSpec.describe "Bad input and the remaining hangs" do
  # The task's outcome (see #capture) once the loop ran (at most +seconds+),
  # or [:hung].
  def task_outcome(evloop, seconds = 1.5, &)
    task = evloop.spawn { capture(&) }
    begin
      Timeout.timeout(seconds) { evloop.run }
    rescue Timeout::Error
      nil
    end
    task.alive? ? [:hung] : task.wait
  end

  # The fds this process has open (not counting the directory listing them).
  def open_fds
    Dir.open("/proc/self/fd") { |dir| dir.children.map(&:to_i) - [dir.fileno] }
  end

  # The loop-internal fds worth stealing: eventfds and the read ends of pipes.
  def readable_internal_fd?(number)
    link = File.readlink("/proc/self/fd/#{number}")
    return true if link.include?("eventfd")

    flags = File.read("/proc/self/fdinfo/#{number}")[/^flags:\s*(\d+)/, 1].to_i(8)
    link.start_with?("pipe:") && (flags & 3).zero?
  rescue SystemCallError
    false
  end

  # How add_io (Integer fd and IO) and release_io treat each of +fds+: the
  # class of what they raised, or :accepted.
  def refusals(evloop, fds)
    fds.flat_map do |fd|
      io = IO.for_fd(fd, autoclose: false)
      [-> { evloop.add_io(fd, Evix::READ) {} }, -> { evloop.add_io(io, Evix::READ) {} }, -> { evloop.release_io(io) }]
        .map do |call|
          call.call
          :accepted
        rescue StandardError => e
          e.class.name
        end
    end
  end

  Evix.backends.each do |backend|
    describe "backend #{backend}" do
      # today: the process aborts ("memory allocation of 171798691840 bytes failed")
      it "add_io and wait_io with fd 2**31 - 1 (an Integer or an object whose fileno says so) raise a clear error" do
        run = run_ruby(<<~RUBY, timeout: 10)
          huge = Object.new
          def huge.to_io = self
          def huge.closed? = false
          def huge.fileno = (2**31) - 1
          evloop = Evix::Loop.new(backend: :#{backend})
          outcomes = [(2**31) - 1, huge].flat_map do |target|
            added = begin
              evloop.add_io(target, Evix::READ) {}
              :accepted
            rescue StandardError => e
              e.class.name
            end
            task = evloop.spawn do
              evloop.wait_io(target, Evix::READ, 0.01)
              :accepted
            rescue StandardError => e
              e.class.name
            end
            evloop.run
            [added, task.wait]
          end
          puts outcomes.inspect
        RUBY
        expect(run.err).not_to include("memory allocation")
        expect(run).to be_success
        expect(eval(run.out)).to all(satisfy { |name| %w[Errno::EBADF ArgumentError].include?(name) }) # rubocop:disable Security/Eval -- an Array of Strings we printed
      end

      # today: raises Errno::EBADF but leaves about 780 MB resident
      it "add_io(10_000_000) raises without growing the resident set by hundreds of MB" do
        run = run_ruby(<<~RUBY, timeout: 10)
          def rss_kb = File.read("/proc/self/status")[/^VmRSS:\\s+(\\d+)/, 1].to_i
          evloop = Evix::Loop.new(backend: :#{backend})
          before = rss_kb
          outcome = begin
            evloop.add_io(10_000_000, Evix::READ) {}
            "accepted"
          rescue StandardError => e
            e.class.name
          end
          puts outcome, rss_kb - before
        RUBY
        expect(run).to be_success
        outcome, growth_kb = run.out.split("\n")
        expect(outcome).to eq("Errno::EBADF").or eq("ArgumentError")
        expect(Integer(growth_kb)).to be < 100_000
      end

      # today: add_io and release_io accept the waker's fd
      it "refuses add_io and release_io on the loop's own waker fd and still wakes", timing: true do
        result = in_child do
          before = open_fds
          evloop = Evix::Loop.new(backend: backend)
          internal = (open_fds - before).select { |fd| readable_internal_fd?(fd) }
          refused = refusals(evloop, internal)
          evloop.add_timer(3) {} # without a wakeup run_once sleeps until this timer
          Thread.new do
            sleep 0.1
            evloop.wakeup
          end
          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          evloop.run_once(nil)
          woke_in = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
          { internal: internal.size, refused: refused.uniq, woke_in: woke_in }
        end
        expect(result[:internal]).to be >= 1
        expect(result[:refused]).to eq(["ArgumentError"])
        expect(result[:woke_in]).to be < 1.5
      end

      # today: add_io and release_io accept the signal pipe's fd (released, the signal never arrives)
      it "refuses add_io and release_io on the loop's signal-pipe fd and signals still arrive" do
        result = in_child do
          evloop = Evix::Loop.new(backend: backend)
          got = []
          before = open_fds
          evloop.add_signal(:USR1) { got << :usr1 }
          internal = (open_fds - before).select { |fd| readable_internal_fd?(fd) }
          refused = refusals(evloop, internal)
          Process.kill(:USR1, Process.pid)
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 2
          evloop.run_once(0.05) while got.empty? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
          { internal: internal.size, refused: refused.uniq, got: got }
        end
        expect(result).to match(internal: be >= 1, refused: ["ArgumentError"], got: [:usr1])
      end

      # today: blocks (the child is killed)
      it "IO#read_nonblock on an empty pipe inside Evix.run returns :wait_readable or raises, never blocks" do
        result = in_child(timeout: 3) do
          ENV["EVIX_BACKEND"] = backend.to_s
          Evix.run do
            r, w = IO.pipe
            soft = r.read_nonblock(10, exception: false)
            hard = capture { r.read_nonblock(10) }.first(2)
            w.close
            [soft, hard]
          end
        end
        expect(result).to eq([:wait_readable, [:raised, "IO::EAGAINWaitReadable"]])
      end

      # today: the caller waits forever (the child is killed)
      it "an offload job that calls Thread.exit raises in its caller and later jobs still run" do
        result = in_child(timeout: 3) do
          ENV["EVIX_BACKEND"] = backend.to_s
          Evix.run do
            first = capture { Evix.offload { Thread.exit } }
            [first[0], capture { Evix.offload { :later } }]
          end
        end
        expect(result).to eq([:raised, %i[value later]])
      end

      # today: the caller waits forever (the child is killed)
      it "an offload job whose thread is killed raises in its caller and later jobs still run" do
        result = in_child(timeout: 3) do
          ENV["EVIX_BACKEND"] = backend.to_s
          Evix.run do
            jobs = Thread::Queue.new
            Thread.new { jobs.pop.kill }
            first = capture do
              Evix.offload do
                jobs << Thread.current
                sleep 2
                :slept
              end
            end
            [first[0], capture { Evix.offload { :later } }]
          end
        end
        expect(result).to eq([:raised, %i[value later]])
      end

      # today: the fibers get Errno::ECONNRESET without the message ("Connection reset by peer")
      it "Fiber#raise(Errno::ECONNRESET, \"boom\") into a fiber parked in a socket read or write arrives as is" do
        result = in_child do
          ENV["EVIX_BACKEND"] = backend.to_s
          server = ::TCPServer.new("127.0.0.1", 0)
          sockets = Array.new(2) { [TCPSocket.new("127.0.0.1", server.addr[1]), server.accept] }
          fill_up(sockets[1][0])
          Evix.run do
            results = {}
            reader = Fiber.schedule { results[:read] = capture { sockets[0][0].read(5) } }
            writer = Fiber.schedule { results[:write] = capture { sockets[1][0].write("y" * 4_000_000) } }
            sleep 0.05
            reader.raise(Errno::ECONNRESET, "boom")
            writer.raise(Errno::ECONNRESET, "boom")
            results
          end
        end
        expected = [:raised, "Errno::ECONNRESET", Errno::ECONNRESET.new("boom").message]
        expect(result).to eq(read: expected, write: expected)
      end

      # today: gets(-1) returns everything up to end of file in one String, then nil
      it "Evix::IO#gets with a negative limit reads like IO#gets (no limit)" do
        text = "hello world\nsecond line\nthird\n"
        result = in_child do
          evloop = Evix::Loop.new(backend: backend)
          r, w = IO.pipe
          w.write(text)
          w.close
          io = evloop.wrap(r)
          task_outcome(evloop) { [io.gets(-1), io.gets("\n", -1), io.gets(nil, -1)] }
        end
        plain_r, plain_w = pipe
        plain_w.write(text)
        plain_w.close
        expect(result).to eq([:value, [plain_r.gets(-1), plain_r.gets("\n", -1), plain_r.gets(nil, -1)]])
      end

      # today: Evix::Error raised after part of the data went out
      it "Evix::IO#write from another thread writes all the data or raises before writing anything" do
        size = 2_000_000
        result = in_child do
          evloop = Evix::Loop.new(backend: backend)
          ours, peer = UNIXSocket.pair
          io = evloop.wrap(ours)
          outcome = nil
          writer = Thread.new { outcome = capture { io.write("x" * size) } }
          received = 0
          reader = Thread.new do
            while peer.wait_readable(0.5)
              chunk = peer.read_nonblock(65_536, exception: false)
              break if chunk.nil?

              received += chunk.bytesize if chunk.is_a?(String)
            end
          end
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
          evloop.run_once(0.05) while writer.alive? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
          reader.join(2)
          [outcome&.first, received]
        end
        expect(result).to eq([:value, size]).or eq([:raised, 0])
      end
    end
  end

  describe "arguments that make no sense" do
    let!(:ev) { new_loop }

    def loaded_pipe
      r, w = pipe
      w.write("line one\nline two\n")
      [r, w]
    end

    def outcome_in_task(&)
      task = ev.spawn { capture(&) }
      ev.run
      task.wait
    end

    # today: returns nil
    it "Evix::IO#read_exactly(-1) raises ArgumentError showing -1" do
      r, = loaded_pipe
      io = ev.wrap(r)
      result = outcome_in_task { io.read_exactly(-1) }
      expect(result).to match([:raised, "ArgumentError", include("-1")])
    end

    # today: wrap, read and write accept it (gets, read_exactly and wait_readable raise, via wait_io)
    it "timeout: -1 and timeout: Float::NAN raise ArgumentError at the call, showing the value" do
      r, w = loaded_pipe
      io = ev.wrap(r)
      out = ev.wrap(w)
      results = [-1, Float::NAN].to_h do |bad|
        calls = {
          wrap: -> { ev.wrap(r, timeout: bad) },
          read: -> { io.read(timeout: bad) },
          gets: -> { io.gets(timeout: bad) },
          read_exactly: -> { io.read_exactly(1, timeout: bad) },
          wait_readable: -> { io.wait_readable(timeout: bad) },
          write: -> { out.write("x", timeout: bad) }
        }
        [bad.to_s, calls.transform_values { |call| outcome_in_task { call.call }.first(3) }]
      end
      results.each do |shown, calls|
        expect(calls.values).to all(match([:raised, "ArgumentError", include(shown)]))
      end
    end

    # today: accepted (the server is created)
    it "Evix::TCPServer idle_timeout: -1 raises ArgumentError showing -1" do
      server = nil
      result = capture { server = Evix::TCPServer.new(ev, "127.0.0.1", 0, idle_timeout: -1) { nil } }
      expect(result).to match([:raised, "ArgumentError", include("-1")])
    ensure
      server&.close
    end
  end

  describe "Evix::Scheduler" do
    # today: each close walks every open scheduler (about 50 times slower)
    it "1000 schedulers never closed do not slow down IO#close elsewhere", timing: true do
      run = run_ruby(<<~RUBY, timeout: 20)
        def close_pipes
          pipes = Array.new(1000) { IO.pipe }
          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          pipes.each { |r, w| r.close; w.close }
          Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
        end
        def best = Array.new(5) { close_pipes }.min
        before = best
        evloop = Evix::Loop.new
        kept = Array.new(1000) { Evix::Scheduler.new(evloop) }
        after = best
        puts after / before, kept.size
      RUBY
      expect(run).to be_success
      ratio, kept = run.out.split("\n")
      expect(Integer(kept)).to eq(1000)
      expect(Float(ratio)).to be < 3
    end

    # today: Fiber.scheduler is still the closed scheduler
    it "close on a scheduler that is still installed uninstalls it" do
      result = in_child do
        scheduler = Evix::Scheduler.new
        Fiber.set_scheduler(scheduler)
        scheduler.close
        Fiber.scheduler.nil?
      end
      expect(result).to be(true)
    end
  end
end
