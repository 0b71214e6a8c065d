# frozen_string_literal: true

require "spec_helper"
require "io/wait"
require "net/http"
require "tempfile"
require "tmpdir"

# Evix::Scheduler: plain standard-library code inside Fiber.schedule / Evix.run,
# on real sockets, pipes, processes and threads.
RSpec.describe Evix::Scheduler do
  # A subclass of Evix::Scheduler that counts how often Ruby calls each hook.
  # Only the hooks Evix::Scheduler defines on this Ruby are wrapped, so
  # `super` always exists.
  def counting_scheduler_class
    hooks = %i[io_wait io_read io_write io_select io_pread io_pwrite kernel_sleep block unblock
               process_wait address_resolve timeout_after].select { |hook| described_class.method_defined?(hook) }
    Class.new(described_class) do
      def calls
        @calls ||= Hash.new(0)
      end

      hooks.each do |hook|
        define_method(hook) do |*args, &block|
          calls[hook] += 1
          super(*args, &block)
        end
      end
    end
  end

  # Sets +scheduler+ on this thread, runs the block in a scheduled fiber, runs
  # the scheduler to completion and returns the block's value.
  # If the block fails, the remaining fibers are abandoned rather than run to
  # completion (which could wait forever).
  def run_with(scheduler)
    outcome = nil
    Fiber.set_scheduler(scheduler)
    Fiber.schedule { outcome = yield scheduler }
    scheduler.run
    outcome
  rescue Exception # rubocop:disable Lint/RescueException -- re-raised
    scheduler.define_singleton_method(:close) { nil }
    scheduler.loop.close unless scheduler.loop.closed?
    raise
  ensure
    Fiber.set_scheduler(nil)
  end

  # Schedules a fiber that counts 10 ms ticks until state[:done] is set.
  def start_ticker(state)
    state[:ticks] = 0
    Fiber.schedule do
      until state[:done]
        state[:ticks] += 1
        sleep 0.01
      end
    end
  end

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

    # Kernel#sleep counts whole wall-clock seconds: 1 when the sleep crosses a
    # second boundary.
    it "returns the whole seconds slept, like Kernel#sleep without a scheduler" do
      before = Time.now.to_i
      slept = Evix.run { sleep 0.02 }
      expect(slept).to be_an(Integer).and(be_between(0, Time.now.to_i - before))
    end

    it "interleaves fibers at their sleeps", timing: true do
      log = []
      Evix.run do
        Fiber.schedule do
          log << :a1
          sleep 0.04
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
        Timeout.timeout(0.15) { sleep 1 }
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

  describe "TCPServer and TCPSocket" do
    it "echoes over 200 concurrent connections with gets/puts/read/write, all open at once", timing: true do
      count = 200
      server = TCPServer.new("127.0.0.1", 0)
      track_io(server)
      port = server.addr[1]
      accepted = 0
      replies = {}
      took = elapsed do
        Evix.run do
          Fiber.schedule do
            count.times do
              conn = server.accept
              accepted += 1
              Fiber.schedule do
                conn.puts(conn.gets.upcase)
                conn.write(conn.read(6).reverse)
              ensure
                conn.close
              end
            end
          end
          count.times do |i|
            Fiber.schedule do
              sock = TCPSocket.new("127.0.0.1", port)
              sleep 0.005 until accepted == count # every connection is open before any talks
              sock.puts("hello #{i}")
              line = sock.gets
              sock.write(format("n%05d", i))
              replies[i] = [line, sock.read(6), sock.read]
            ensure
              sock&.close
            end
          end
        end
      end
      expect(accepted).to eq(count)
      expect(replies.size).to eq(count)
      count.times do |i|
        expect(replies[i]).to eq(["HELLO #{i}\n", format("n%05d", i).reverse, ""])
      end
      expect(took).to be < 5
    end
  end

  describe "IO.select" do
    # Ruby >= 3.3 calls io_select with only the arguments IO.select was given.
    it "takes one, two or four arguments, and returns when another thread writes" do
      r, w = pipe
      result = in_child do
        Thread.new do
          sleep 0.05
          w.write("x")
        end
        Evix.run do
          # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- the hook is what is tested
          [IO.select([r]), IO.select([r], [w]), IO.select([r], nil, nil, 1)].map { |ready| ready.map(&:size) }
          # rubocop:enable Lint/IncompatibleIoSelectWithFiberScheduler
        end
      end
      expect(result).to eq([[1, 0, 0], [1, 1, 0], [1, 0, 0]])
    end
  end

  describe "IO.pipe" do
    it "moves 1 MB from a writer fiber to a reader fiber without deadlock, bytes intact" do
      r, w = pipe
      r.binmode
      w.binmode
      data = Random.new(42).bytes(1 << 20)
      writer_done_before_reading = nil
      writer_done = false
      received = Evix.run do
        Fiber.schedule do
          w.write(data)
          writer_done = true
          w.close
        end
        sleep 0.02 # the writer fills the pipe buffer and must wait for us
        writer_done_before_reading = writer_done
        r.read
      end
      expect(writer_done_before_reading).to be(false)
      expect(received.bytesize).to eq(data.bytesize)
      expect(received).to eq(data)
    end

    it "keeps other fibers running while a reader waits for data", timing: true do
      r, w = pipe
      state = {}
      result = Evix.run do
        start_ticker(state)
        Fiber.schedule do
          sleep 0.1
          w.write("late\n")
        end
        r.gets
      ensure
        state[:done] = true
      end
      expect(result).to eq("late\n")
      expect(state[:ticks]).to be >= 5
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
        sleep 0.1
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

  describe "Process.wait2" do
    it "waits for a spawned child while other fibers run, with the right exit status", timing: true do
      state = {}
      pid = nil
      waited = Evix.run do
        start_ticker(state)
        pid = Process.spawn("sh", "-c", "sleep 0.2; exit 3")
        Process.wait2(pid)
      ensure
        state[:done] = true
      end
      expect(waited[0]).to eq(pid)
      expect(waited[1]).to be_a(Process::Status)
      expect(waited[1].exitstatus).to eq(3)
      expect(state[:ticks]).to be >= 5
    ensure
      wait_child(pid, timeout: 1) if pid && waited.nil?
    end

    it "reports a child killed by a signal from another fiber" do
      pid = Process.spawn("sleep", "5")
      status = Evix.run do
        Fiber.schedule do
          sleep 0.05
          Process.kill(:TERM, pid)
        end
        Process.wait2(pid)[1]
      end
      expect(status).to be_signaled
      expect(status.termsig).to eq(Signal.list["TERM"])
    ensure
      wait_child(pid, timeout: 1) if pid && status.nil?
    end

    # In a child process: a lost offload result leaves Evix.run waiting
    # forever, and nothing can interrupt it (see run_spec).
    it "waits for several children from several fibers at once, each getting its own status", timing: true do
      result = in_child do
        Evix.run { Evix.offload { :warm } } # one idle pool thread, as after any earlier offload
        pids = [0.1, 0.15, 0.05].each_with_index.map do |delay, i|
          Process.spawn("sh", "-c", "sleep #{delay}; exit #{i + 1}")
        end
        statuses = {}
        took = elapsed do
          Evix.run { pids.each { |pid| Fiber.schedule { statuses[pid] = Process.wait2(pid)[1].exitstatus } } }
        end
        [pids.map { |pid| statuses[pid] }, took]
      end
      expect(result[0]).to eq([1, 2, 3])
      expect(result[1]).to be < 0.5
    end
  end

  describe "name resolution" do
    # Resolution of "localhost" is instant, so the resolver's own lookup
    # (made on the offload pool, where no scheduler is set) is slowed down to
    # stand for a slow DNS server.
    def slow_resolver(delay)
      allow(Addrinfo).to receive(:getaddrinfo).and_wrap_original do |original, *args|
        sleep delay if Fiber.scheduler.nil? && !Thread.current.equal?(Thread.main)
        original.call(*args)
      end
    end

    it "resolves Addrinfo.getaddrinfo(\"localhost\", 80) without blocking other fibers", timing: true do
      slow_resolver(0.15)
      state = {}
      infos = Evix.run do
        start_ticker(state)
        Addrinfo.getaddrinfo("localhost", 80)
      ensure
        state[:done] = true
      end
      expect(infos).not_to be_empty
      expect(infos.map(&:ip_address)).to include("127.0.0.1")
      expect(infos.map(&:ip_port).uniq).to eq([80])
      expect(state[:ticks]).to be >= 5
    end

    it "connects TCPSocket.new(\"localhost\", port) without blocking other fibers", timing: true do
      slow_resolver(0.15)
      server = TCPServer.new("127.0.0.1", 0)
      track_io(server)
      state = {}
      reply = Evix.run do
        start_ticker(state)
        Fiber.schedule do
          conn = server.accept
          conn.puts("hi #{conn.gets}")
          conn.close
        end
        sock = TCPSocket.new("localhost", server.addr[1])
        sock.puts("there")
        line = sock.gets
        sock.close
        line
      ensure
        state[:done] = true
      end
      expect(reply).to eq("hi there\n")
      expect(state[:ticks]).to be >= 5
    end

    it "goes through the address_resolve hook" do
      scheduler = counting_scheduler_class.new
      infos = run_with(scheduler) { Addrinfo.getaddrinfo("localhost", 80) }
      expect(infos.map(&:ip_address)).to include("127.0.0.1")
      expect(scheduler.calls[:address_resolve]).to be >= 1
    end
  end

  describe "Net::HTTP.get" do
    # A tiny HTTP/1.1 responder in scheduled fibers: one fiber per connection.
    def serve_http(server, count)
      Fiber.schedule do
        count.times do
          conn = server.accept
          Fiber.schedule do
            path = conn.gets.split[1]
            nil until conn.gets == "\r\n"
            body = "hello from #{path}"
            conn.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: #{body.bytesize}\r\n" \
                       "Connection: close\r\n\r\n#{body}")
          ensure
            conn.close
          end
        end
      end
    end

    it "fetches from an HTTP server running in the same scheduler" do
      server = TCPServer.new("127.0.0.1", 0)
      track_io(server)
      body = Evix.run do
        serve_http(server, 1)
        Net::HTTP.get(URI("http://127.0.0.1:#{server.addr[1]}/ping"))
      end
      expect(body).to eq("hello from /ping")
    end

    it "runs several requests concurrently against that server" do
      server = TCPServer.new("127.0.0.1", 0)
      track_io(server)
      bodies = {}
      Evix.run do
        serve_http(server, 5)
        5.times do |i|
          Fiber.schedule { bodies[i] = Net::HTTP.get(URI("http://127.0.0.1:#{server.addr[1]}/#{i}")) }
        end
      end
      expect(bodies.sort.map(&:last)).to eq(Array.new(5) { |i| "hello from /#{i}" })
    end
  end

  describe "closing an IO that another fiber waits on" do
    it "wakes the reader with IOError when another fiber closes it", timing: true do
      r, = pipe
      error = nil
      took = elapsed do
        Evix.run do
          Fiber.schedule do
            r.read(1)
          rescue IOError => e
            error = e
          end
          sleep 0.05
          r.close
        end
      end
      expect(error).to be_a(IOError)
      expect(took).to be < 0.5
    end

    it "wakes the reader with IOError when another thread closes it", timing: true do
      r, = pipe
      helper_thread do
        sleep 0.1
        r.close
      end
      error = nil
      took = elapsed do
        Evix.run do
          r.read(1)
        rescue IOError => e
          error = e
        end
      end
      expect(error).to be_a(IOError)
      expect(took).to be_between(0.09, 0.5)
    end

    it "keeps the loop usable after such a close" do
      r, = pipe
      r2, w2 = pipe
      result = Evix.run do
        Fiber.schedule do
          r.gets
        rescue IOError
          nil
        end
        sleep 0.02
        r.close
        Fiber.schedule do
          sleep 0.02
          w2.write("still fine\n")
        end
        r2.gets
      end
      expect(result).to eq("still fine\n")
    end
    it "wakes every fiber waiting on the IO, a reader and a writer alike", timing: true do
      a, = socket_pair
      woken = []
      Evix.run do
        # Timeout: a fiber the close leaves waiting fails the example instead of hanging it.
        Fiber.schedule do
          Timeout.timeout(2) { a.read(1) }
        rescue IOError, Timeout::Error => e
          woken << [:reader, e.class]
        end
        Fiber.schedule do
          Timeout.timeout(2) { a.write("x" * 65_536) while true } # rubocop:disable Style/InfiniteLoop -- fills the buffer
        rescue IOError, Timeout::Error => e
          woken << [:writer, e.class]
        end
        sleep 0.05
        a.close
      end
      expect(woken).to contain_exactly([:reader, IOError], [:writer, IOError])
    end

    it "still wakes a fiber whose fellow waiter on the same IO went on before the close" do
      r, w = pipe
      got = []
      woken = []
      Evix.run do
        2.times do |i|
          Fiber.schedule do
            got << r.read(1)
          rescue IOError
            woken << i
          end
        end
        sleep 0.02
        w.write("a") # wakes both; one reads it, the other waits again
        sleep 0.02
        r.close
      end
      expect(got).to eq(["a"])
      expect(woken.size).to eq(1)
    end

    it "wakes a fiber of another thread's scheduler when a fiber of this one closes the IO" do
      r, = pipe
      error = nil
      reader = helper_thread do
        Evix.run do
          r.read(1)
        rescue IOError => e
          error = e
        end
      end
      sleep 0.05
      Evix.run { r.close }
      # A generous limit: join returns as soon as the reader ends, and under
      # GC.stress in the full suite waking it has taken more than 2 s.
      expect(reader.join(30)).to be(reader)
      expect(error).to be_a(IOError)
    end
  end

  describe "hooks called directly" do
    it "io_wait returns false when the timeout passes first", timing: true do
      r, = pipe
      result = nil
      took = elapsed { Evix.run { result = Fiber.scheduler.io_wait(r, IO::READABLE, 0.05) } }
      expect(result).to be(false)
      expect(took).to be_between(0.045, 0.4)
    end

    # Another thread closing the IO between a fiber's read and its wait
    # reaches io_wait with a closed IO; Ruby code rescues IOError there.
    it "io_wait raises IOError for an IO closed before the wait, and keeps no waiter for it" do
      r, = pipe
      r2, w2 = pipe
      r.close
      result = Evix.run do
        scheduler = Fiber.scheduler
        expect { scheduler.io_wait(r, IO::READABLE, 1) }
          .to raise_error(IOError, "stream closed in another fiber or thread")
        [scheduler.loop.stats[:waiters], w2.write("x"), r2.wait_readable(1)]
      end
      expect(result).to eq([0, 1, r2])
    end

    it "io_wait reports a regular file ready at once, as Ruby does without a scheduler (epoll cannot watch files)" do
      File.open(__FILE__) do |file|
        expect(file.wait_readable(1)).to equal(file) # no scheduler: ready
        result = Evix.run do
          [file.wait_readable(1), Fiber.scheduler.io_wait(file, IO::READABLE, 1)]
        end
        expect(result).to eq([file, IO::READABLE])
      end
    end

    it "io_wait reports a plain IO on a regular file (a redirected $stderr, say) ready at once; writes to it work" do
      Tempfile.create("evix") do |file|
        io = IO.for_fd(file.fileno, autoclose: false) # an IO, not a File
        io.sync = true
        result = Evix.run do
          io.puts "one"
          io.write "two\n"
          Fiber.scheduler.io_wait(io, IO::READABLE | IO::WRITABLE, 1)
        end
        expect(result).to eq(IO::READABLE | IO::WRITABLE)
        expect(File.read(file.path)).to eq("one\ntwo\n")
      end
    end

    it "io_wait allocates no Ruby object per wait" do
      _, w = pipe
      per_wait = Evix.run do
        scheduler = Fiber.scheduler
        scheduler.io_wait(w, IO::WRITABLE, nil)
        before = GC.stat(:total_allocated_objects)
        1000.times { scheduler.io_wait(w, IO::WRITABLE, nil) }
        (GC.stat(:total_allocated_objects) - before) / 1000.0
      end
      expect(per_wait).to be < 0.5
    end

    it "io_wait returns the ready events when the IO becomes ready" do
      r, w = pipe
      result = Evix.run do
        Fiber.schedule do
          sleep 0.02
          w.write("x")
        end
        [Fiber.scheduler.io_wait(r, IO::READABLE, 1), Fiber.scheduler.io_wait(w, IO::WRITABLE, 1)]
      end
      expect(result).to eq([IO::READABLE, IO::WRITABLE])
    end

    it "IO#wait_readable with a timeout returns nil through io_wait" do
      r, = pipe
      scheduler = counting_scheduler_class.new
      result = run_with(scheduler) { r.wait_readable(0.03) }
      expect(result).to be_nil
      expect(scheduler.calls[:io_wait]).to be >= 1
    end

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

    it "unblock after the scheduler closed its loop returns nil without raising" do
      scheduler = described_class.new
      scheduler.close
      expect(scheduler.loop).to be_closed
      expect(scheduler.unblock(:spec, Fiber.current)).to be_nil
    end

    it "fiber starts the block at once, in a non-blocking fiber, and returns that fiber" do
      log = []
      info = Evix.run do
        fiber = Fiber.schedule do
          log << [:started, Fiber.current.blocking?]
          sleep 0.01
          log << :resumed
        end
        log << :after_schedule
        fiber
      end
      expect(info).to be_a(Fiber)
      expect(log).to eq([[:started, false], :after_schedule, :resumed])
    end

    it "counts the fibers that have not finished" do
      counts = Evix.run do
        scheduler = Fiber.scheduler
        before = scheduler.fibers
        2.times { Fiber.schedule { sleep 0.02 } }
        during = scheduler.fibers
        sleep 0.05
        [before, during, scheduler.fibers]
      end
      expect(counts).to eq([1, 3, 1])
    end

    it "address_resolve returns the addresses of a name, brackets and zone ids stripped" do
      result = Evix.run do
        [Fiber.scheduler.address_resolve("localhost"), Fiber.scheduler.address_resolve("[::1]"),
         Fiber.scheduler.address_resolve("::1%lo")]
      end
      expect(result[0]).to include("127.0.0.1")
      expect(result[1]).to eq(["::1"])
      expect(result[2]).to eq(["::1"])
    end
  end

  describe "Fiber.set_scheduler lifecycle" do
    it "close (Fiber.set_scheduler(nil)) runs the remaining fibers, then closes the loop it created" do
      scheduler = described_class.new
      done = false
      Fiber.set_scheduler(scheduler)
      Fiber.schedule do
        sleep 0.03
        done = true
      end
      expect(done).to be(false)
      Fiber.set_scheduler(nil)
      expect(done).to be(true)
      expect(scheduler.loop).to be_closed
      expect(Fiber.scheduler).to be_nil
    ensure
      Fiber.set_scheduler(nil)
    end

    it "leaves a loop it was given open" do
      evloop = new_loop
      scheduler = described_class.new(evloop)
      expect(scheduler.loop).to equal(evloop)
      result = run_with(scheduler) do
        sleep 0.01
        :slept
      end
      expect(result).to eq(:slept)
      expect(evloop).not_to be_closed
    end

    it "closes a thread's scheduler when the thread exits", timing: true do
      scheduler = nil
      done = false
      thread = helper_thread do
        scheduler = described_class.new
        Fiber.set_scheduler(scheduler)
        Fiber.schedule do
          sleep 0.03
          done = true
        end
      end
      thread.join(3)
      expect(done).to be(true)
      expect(scheduler.loop).to be_closed
    end
  end

  describe "the io_read and io_write hooks" do
    it "carry plain reads and writes on a pipe" do
      r, w = pipe
      scheduler = counting_scheduler_class.new
      result = run_with(scheduler) do
        Fiber.schedule do
          sleep 0.01
          w.write("hello ")
          sleep 0.01
          w.write("world\n")
          w.close
        end
        [r.gets, r.read]
      end
      expect(result).to eq(["hello world\n", ""])
      expect(scheduler.calls[:io_read]).to be >= 1
      expect(scheduler.calls[:io_write]).to be >= 2
    end

    it "carry reads and writes on a socket" do
      a, b = socket_pair
      scheduler = counting_scheduler_class.new
      result = run_with(scheduler) do
        Fiber.schedule do
          b.write("ping")
          b.close_write
        end
        a.read(4)
      end
      expect(result).to eq("ping")
      expect(scheduler.calls[:io_read]).to be >= 1
      expect(scheduler.calls[:io_write]).to be >= 1
    end

    it "after a short read from a socket wait before reading again, instead of a read that fails with EAGAIN" do
      # The hook calls recv itself, so the kernel is what can count its reads:
      # a child process under strace, 20 round trips over a socket pair.
      script = <<~RUBY
        require "evix"
        a, b = UNIXSocket.pair
        replies = Evix.run do
          Fiber.schedule { 20.times { b.write(b.readpartial(64)) } }
          Array.new(20) { |i| a.write("m\#{i}"); a.readpartial(64) }
        end
        exit(replies == Array.new(20) { |i| "m\#{i}" } ? 0 : 1)
      RUBY
      Dir.mktmpdir do |dir|
        trace = File.join(dir, "trace")
        ok = system("strace", "-f", "-qq", "-e", "trace=recvfrom", "-o", trace,
                    RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", script)
        expect(ok).to be(true)
        calls = File.readlines(trace).grep(/recvfrom\(/)
        expect(calls.count { |line| line.match?(/= [1-9]/) }).to eq(40) # 20 reads on each side
        expect(calls.count { |line| line.include?("EAGAIN") }).to be <= 2 # each side's first read
      end
    end

    it "read at once what arrived on a socket between a short read and the next", timing: true do
      a, b = socket_pair
      result = Evix.run do
        b.write("first")
        first = a.readpartial(64)
        b.write("second")
        second = nil
        took = elapsed { second = a.readpartial(64) }
        [first, second, took]
      end
      expect(result[0, 2]).to eq(%w[first second])
      expect(result[2]).to be < 0.5
    end

    it "fill a read of a given length across several short reads from a socket" do
      a, b = socket_pair
      result = Evix.run do
        Fiber.schedule do
          %w[ab cd ef].each do |part|
            sleep 0.01
            b.write(part)
          end
        end
        a.read(6)
      end
      expect(result).to eq("abcdef")
    end

    it "return a short read at end of file" do
      r, w = pipe
      result = Evix.run do
        w.write("abc")
        w.close
        [r.read(10), r.read(10)]
      end
      expect(result).to eq(["abc", nil])
    end
  end

  describe "the io_read and io_write hooks called directly" do
    # IO::Buffer is experimental on Ruby 3.1, which warns when one is made.
    def quietly
      experimental = Warning[:experimental]
      Warning[:experimental] = false
      yield
    ensure
      Warning[:experimental] = experimental
    end

    def buffer(size) = quietly { IO::Buffer.new(size) }

    it "io_read fills the buffer at the offset from a socket and returns the count" do
      a, b = socket_pair
      result = Evix.run do
        scheduler = Fiber.scheduler
        buf = buffer(16)
        Fiber.schedule do
          sleep 0.01
          b.write("hello")
        end
        read = scheduler.io_read(a, buf, 5, 2)
        [read, buf.get_string(2, 5)]
      end
      expect(result).to eq([5, "hello"])
    end

    it "io_write sends the buffer from the offset and returns the count" do
      a, b = socket_pair
      written = Evix.run do
        buf = buffer(8)
        buf.set_string("..abcdef")
        Fiber.scheduler.io_write(a, buf, 6, 2)
      end
      expect(written).to eq(6)
      expect(b.read_nonblock(64)).to eq("abcdef")
    end

    it "io_read returns 0 at the end of the stream and io_write -EPIPE once the peer is gone" do
      a, b = socket_pair
      b.close
      result = Evix.run do
        scheduler = Fiber.scheduler
        [scheduler.io_read(a, buffer(4), 1), scheduler.io_write(a, buffer(4), 4)]
      end
      expect(result).to eq([0, -Errno::EPIPE::Errno])
    end

    it "io_write on a socket whose kernel buffer is full waits until the peer reads" do
      a, b = socket_pair
      big = buffer(4 << 20)
      result = Evix.run do
        Fiber.schedule do
          got = 0
          got += b.readpartial(1 << 16).bytesize while got < (4 << 20)
        end
        Fiber.scheduler.io_write(a, big, 4 << 20)
      end
      expect(result).to eq(4 << 20)
    end

    it "reject what is not an IO::Buffer, a read-only buffer and an offset past the end, leaving the socket alone" do
      a, b = socket_pair
      b.write("kept")
      errors = Evix.run do
        scheduler = Fiber.scheduler
        readonly = quietly { IO::Buffer.for("frozen") }
        [-> { scheduler.io_read(a, "not a buffer", 1) },
         -> { scheduler.io_read(a, readonly, 1) },
         -> { scheduler.io_read(a, buffer(4), 1, 5) },
         -> { scheduler.io_write(a, buffer(4), 1, 5) }].map do |call|
          call.call
        rescue StandardError => e
          e.class
        end
      end
      expect(errors[0]).to eq(TypeError)
      expect(errors[1]).to be < StandardError
      expect(errors[1].name).to match(/AccessError/)
      expect(errors[2..]).to eq([ArgumentError, ArgumentError])
      expect(a.read_nonblock(64)).to eq("kept")
    end

    it "io_wait rejects events that are not an Integer" do
      r, = pipe
      expect { Evix.run { Fiber.scheduler.io_wait(r, "readable", 1) } }.to raise_error(TypeError)
    end

    if IO.method_defined?(:timeout)
      it "io_read on a socket gives -ETIMEDOUT after the IO's own timeout (Ruby >= 3.2)" do
        a, = socket_pair
        a.timeout = 0.05
        result = Evix.run do
          scheduler = Fiber.scheduler
          # The first read finds nothing and waits; the wait times out.
          scheduler.io_read(a, buffer(4), 1)
        end
        expect(result).to eq(-Errno::ETIMEDOUT::Errno)
      end
    end
  end

  if RUBY_VERSION >= "3.3"
    describe "IO.select (io_select hook, Ruby >= 3.3)" do
      it "does not block the other fibers while it waits out its timeout", timing: true do
        r, = pipe
        state = {}
        scheduler = counting_scheduler_class.new
        result = run_with(scheduler) do
          start_ticker(state)
          IO.select([r], nil, nil, 0.15) # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- under test
        ensure
          state[:done] = true
        end
        expect(result).to be_nil
        expect(state[:ticks]).to be >= 5
        expect(scheduler.calls[:io_select]).to eq(1)
      end

      it "returns the ready IOs once another fiber writes" do
        r, w = pipe
        result = Evix.run do
          Fiber.schedule do
            sleep 0.03
            w.write("x")
          end
          IO.select([r], nil, nil, 2) # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- under test
        end
        expect(result).to eq([[r], [], []])
      end
    end

    describe "IO#pread and IO#pwrite (io_pread/io_pwrite hooks, Ruby >= 3.3)" do
      # Each runs in a forked child: a hook that wedges the process must fail
      # the example, not hang the suite.
      it "IO#pread on a Tempfile returns the right data through io_pread, and the loop keeps working" do
        result = in_child do
          scheduler = counting_scheduler_class.new
          Tempfile.create("evix") do |file|
            file.write("hello world")
            file.flush
            run_with(scheduler) do
              data = [file.pread(5, 6), file.pread(100, 0)]
              sleep 0.01
              data + [Evix.offload { :offloaded }, scheduler.calls[:io_pread]]
            end
          end
        end
        expect(result).to eq(["world", "hello world", :offloaded, 2])
      end

      # Ruby 3.3.8 calls io_pwrite from inside IO#pwrite's blocking call: a
      # hook that switches fibers or does blocking IO there wedges the thread
      # (seen with a minimal scheduler too), so a scheduler may rightly leave
      # io_pwrite undefined on such a Ruby; then IO#pwrite must still work.
      it "IO#pwrite on a Tempfile writes the right data (via io_pwrite where defined), and the loop keeps working" do
        hook_calls = described_class.method_defined?(:io_pwrite) ? 1 : 0
        result = in_child do
          scheduler = counting_scheduler_class.new
          Tempfile.create("evix") do |file|
            file.write("hello world")
            file.flush
            written = run_with(scheduler) do
              count = file.pwrite("HELLO", 0)
              sleep 0.01
              [count, Evix.offload { :offloaded }, scheduler.calls[:io_pwrite]]
            end
            written + [File.binread(file.path)]
          end
        end
        expect(result).to eq([5, :offloaded, hook_calls, "HELLO world"])
      end

      it "IO#pread and IO#pwrite work inside Evix.run" do
        result = in_child do
          Tempfile.create("evix") do |file|
            Evix.run do
              file.pwrite("abcdef", 0)
              sleep 0.01
              file.pread(3, 2)
            end
          end
        end
        expect(result).to eq("cde")
      end
    end
  end
end
