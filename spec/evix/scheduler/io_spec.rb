# frozen_string_literal: true

require "spec_helper"
require "io/wait"
require "net/http"
require "tempfile"
require "tmpdir"

# Evix::Scheduler and plain standard-library I/O inside Evix.run: sockets and
# pipes through the io_wait, io_read, io_write and io_select hooks, closing an
# IO that fibers wait on, Net::HTTP. Files: pipes_files_spec.rb.
RSpec.describe Evix::Scheduler, "I/O" do
  include EvixSchedulerHelpers

  # Every example waits on a socket or a pipe: once per backend.
  on_each_backend do
    it "runs Evix.run on the backend of its context" do
      expect(Evix.run { Fiber.scheduler.loop.backend }).to eq(backend)
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
            sleep 0.3
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

    describe "io_wait called directly" do
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
                      RbConfig.ruby, "-I", File.expand_path("../../../lib", __dir__), "-e", script)
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
          # A String of its own: on Ruby 3.1 a buffer keeps its String locked
          # until the GC frees it, and the literal is one object for both backends.
          readonly = quietly { IO::Buffer.for(String.new("frozen").freeze) }
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

    if RUBY_VERSION >= "3.3"
      describe "IO.select (io_select hook, Ruby >= 3.3)" do
        it "does not block the other fibers while it waits out its timeout", timing: true do
          r, = pipe
          state = {}
          scheduler = counting_scheduler_class.new
          result = run_with(scheduler) do
            start_ticker(state)
            IO.select([r], nil, nil, 0.3) # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- under test
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
    end
  end
end
