# frozen_string_literal: true

require "spec_helper"

# Waiting and closing (docs/architecture.md, "Waiters": waiters have one
# owner, the core): whoever closes an fd, however, from whichever thread, every fiber
# waiting on it is resumed with a closed outcome, on every backend, and a new
# socket that reuses the number is not deaf. Each example runs in a forked
# child with a deadline: today most of these waiters stay parked forever.
RSpec.describe "Waiters on an IO that is closed while they wait" do
  # Runs the loop for at most +seconds+: a task left parked forever shows as
  # [:hung] in #result_of instead of hanging the child.
  def run_at_most(evloop, seconds = 1.5)
    Timeout.timeout(seconds) { evloop.run }
  rescue Timeout::Error
    nil
  end

  def result_of(task)
    task.alive? ? [:hung] : task.wait
  end

  def later(seconds = 0.05, &)
    Thread.new do
      sleep seconds
      yield
    end
  end

  # Runs the block 50 ms from now in another thread (+thread+ true), or
  # 20 ms from now in a task of +evloop+ (the loop's thread).
  def close_soon(evloop, thread:, &block)
    return later(&block) if thread

    evloop.spawn do
      evloop.sleep(0.02)
      block.call
    end
  end

  # A connected pair of TCP sockets on 127.0.0.1: [client, accepted].
  def tcp_pair(server)
    client = TCPSocket.new("127.0.0.1", server.addr[1])
    [client, server.accept]
  end

  closed = ["Evix::ClosedError", String]

  Evix.backends.each do |backend|
    describe "Loop#wait_io (backend #{backend})" do
      # The waiting task's outcome after +close+ ran: from the loop thread
      # (+thread+ false: a task that sleeps a little first), or another thread.
      def wait_io_outcome(backend, thread:, &close)
        in_child do
          evloop = Evix::Loop.new(backend: backend)
          r, _w = IO.pipe
          wrapper = evloop.wrap(r)
          waiter = evloop.spawn { capture { evloop.wait_io(r, Evix::READ) } }
          close_soon(evloop, thread: thread) { close.call(evloop, r, wrapper) }
          run_at_most(evloop)
          result_of(waiter)
        end
      end

      # today: the waiter stays parked forever (its callback is dropped)
      it "raises Evix::ClosedError when an Evix::IO wrapping the IO is closed" do
        result = wait_io_outcome(backend, thread: false) { |_, _, wrapper| wrapper.close }
        expect(result).to match([:raised, *closed])
      end

      # today: the waiter stays parked forever (the posted close drops its callback)
      it "raises Evix::ClosedError when an Evix::IO wrapping the IO is closed from another thread" do
        result = wait_io_outcome(backend, thread: true) { |_, _, wrapper| wrapper.close }
        expect(result).to match([:raised, *closed])
      end

      # today: the waiter stays parked forever (release_io drops its callback)
      it "raises Evix::ClosedError when the loop releases the IO" do
        result = wait_io_outcome(backend, thread: false) { |evloop, r, _| evloop.release_io(r) }
        expect(result).to match([:raised, *closed])
      end

      # today: parked forever on epoll; on poll it returns the ready bits (1)
      it "raises Evix::ClosedError when the IO itself is closed" do
        result = wait_io_outcome(backend, thread: false) { |_, r, _| r.close }
        expect(result).to match([:raised, *closed])
      end

      # today: parked forever (poll is not woken by a close in another thread)
      it "raises Evix::ClosedError when the IO itself is closed from another thread" do
        result = wait_io_outcome(backend, thread: true) { |_, r, _| r.close }
        expect(result).to match([:raised, *closed])
      end

      # today: parked forever on epoll; on poll it returns the ready bits (1)
      it "raises Evix::ClosedError when another IO object for the same fd is closed" do
        result = wait_io_outcome(backend, thread: false) { |_, r, _| IO.for_fd(r.fileno).close }
        expect(result).to match([:raised, *closed])
      end

      # today: parked forever (poll is not woken by a close in another thread)
      it "raises Evix::ClosedError when another IO object for the same fd is closed from another thread" do
        result = wait_io_outcome(backend, thread: true) { |_, r, _| IO.for_fd(r.fileno).close }
        expect(result).to match([:raised, *closed])
      end
    end

    describe "Evix::IO#read, #gets and #write (backend #{backend})" do
      # The outcomes of a read, a gets and a write (each on its own socket,
      # each waiting) after +close+ ran on the three Evix::IOs.
      def io_outcomes(backend, thread:, &close)
        in_child do
          evloop = Evix::Loop.new(backend: backend)
          pairs = Array.new(3) { UNIXSocket.pair }
          ios = pairs.map { |socket, _| evloop.wrap(socket) }
          fill_up(pairs[2][0])
          tasks = {
            read: evloop.spawn { capture { ios[0].read } },
            gets: evloop.spawn { capture { ios[1].gets } },
            write: evloop.spawn { capture { ios[2].write("y" * 1_000_000) } }
          }
          close_soon(evloop, thread: thread) { ios.each(&close) }
          run_at_most(evloop)
          tasks.transform_values { |task| result_of(task) }
        end
      end

      # today: passes
      it "raise Evix::ClosedError when Evix::IO#close runs in another task" do
        result = io_outcomes(backend, thread: false, &:close)
        expect(result).to match(read: [:raised, *closed], gets: [:raised, *closed], write: [:raised, *closed])
      end

      # today: passes
      it "raise Evix::ClosedError when Evix::IO#close runs in another thread" do
        result = io_outcomes(backend, thread: true, &:close)
        expect(result).to match(read: [:raised, *closed], gets: [:raised, *closed], write: [:raised, *closed])
      end

      # today: on epoll all three stay parked forever; passes on poll
      it "raise Evix::ClosedError when the wrapped IO is closed (IO#close) in another task" do
        result = io_outcomes(backend, thread: false) { |io| io.io.close }
        expect(result).to match(read: [:raised, *closed], gets: [:raised, *closed], write: [:raised, *closed])
      end

      # today: all three stay parked forever
      it "raise Evix::ClosedError when the wrapped IO is closed (IO#close) in another thread" do
        result = io_outcomes(backend, thread: true) { |io| io.io.close }
        expect(result).to match(read: [:raised, *closed], gets: [:raised, *closed], write: [:raised, *closed])
      end
    end

    describe "a raw close under a waiting Evix::IO, then a new socket with the same fd (backend #{backend})" do
      # Closes the fd under a reader waiting on an Evix::IO (with +close+),
      # connects a new TCP socket (which gets the lowest free fd, the same
      # number) and reads from it in another task.
      def reuse_outcome(backend, &close)
        in_child do
          evloop = Evix::Loop.new(backend: backend)
          server = ::TCPServer.new("127.0.0.1", 0)
          old_socket, _old_peer = tcp_pair(server) # the peer stays open: no end of file for the old reader
          old = evloop.wrap(old_socket)
          fd = old_socket.fileno
          old_reader = evloop.spawn { capture { old.read } }
          reused = nil
          new_reader = evloop.spawn do
            evloop.sleep(0.02)
            close.call(old, fd)
            socket, peer = tcp_pair(server)
            reused = socket.fileno == fd
            evloop.spawn do
              evloop.sleep(0.02)
              peer.write("hello")
            end
            capture { evloop.wrap(socket).read }
          end
          run_at_most(evloop)
          { reused: reused, new: result_of(new_reader), old: result_of(old_reader) }
        end
      end

      # today: on epoll the new socket is deaf and the old reader stays parked; passes on poll
      it "delivers the new socket's data and wakes the old reader with Evix::ClosedError (io.io.close)" do
        result = reuse_outcome(backend) { |old, _fd| old.io.close }
        expect(result).to match(reused: true, new: [:value, "hello"], old: [:raised, *closed])
      end

      # today: on epoll the new socket is deaf and the old reader stays parked;
      # on poll the old reader steals the new socket's "hello"
      it "delivers the new socket's data and wakes the old reader with Evix::ClosedError (IO.for_fd(fd).close)" do
        result = reuse_outcome(backend) { |_old, fd| IO.for_fd(fd).close }
        expect(result).to match(reused: true, new: [:value, "hello"], old: [:raised, *closed])
      end
    end

    describe "Evix.run: fibers blocked on IOs that another fiber or thread closes (backend #{backend})" do
      # Under Evix.run (at most 2 s), one fiber per operation and kind of IO
      # blocks on its own IO; +closer+ (another fiber, or a :thread) closes
      # the IOs one by one, 30 ms apart, while the run's block sleeps.
      # Returns each fiber's outcome and the run's.
      def closing_run(backend, ops, kinds, closer)
        in_child do
          ENV["EVIX_BACKEND"] = backend.to_s
          results = {}
          run = capture do
            Timeout.timeout(2) do
              Evix.run do
                ios = ops.product(kinds).map { |operation, kind| block_on(operation, kind, results) }
                close_each = lambda do
                  ios.each do |io|
                    sleep 0.03
                    io.close
                  end
                end
                closer == :fiber ? Fiber.schedule(&close_each) : later(0, &close_each)
                sleep 0.5 # the block goes on with its own work meanwhile
                nil
              end
            end
          end
          { run: run.first(2), results: results }
        end
      end

      # Schedules a fiber blocked in +operation+ on a new pipe or socket;
      # its outcome goes to results[[operation, kind]]. Returns the IO.
      def block_on(operation, kind, results)
        r, w = kind == :pipe ? IO.pipe : UNIXSocket.pair
        Fiber.schedule do
          results[[operation, kind]] = summary(capture { blocking_call(operation, r) })
        ensure
          w.close
        end
        r
      end

      # [:raised, class name] or [:value, what was returned, inspected].
      def summary(outcome)
        outcome[0] == :raised ? outcome.first(2) : [:value, outcome[1].inspect]
      end

      def blocking_call(operation, io)
        case operation
        when :read then io.read(5)
        when :gets then io.gets
        when :wait_readable then io.wait_readable
        when :select then IO.select([io]) # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- under test
        end
      end

      ops = %i[read gets wait_readable]
      kinds = %i[pipe socket]
      all_ioerror = ops.product(kinds).to_h { |key| [key, [:raised, "IOError"]] }

      # today: passes
      it "raises IOError in io.read, io.gets and io.wait_readable when another fiber closes the IO" do
        result = closing_run(backend, ops, kinds, :fiber)
        expect(result).to eq(run: [:value, nil], results: all_ioerror)
      end

      # today: passes on epoll; on poll io.wait_readable returns the closed IO instead of raising
      it "raises IOError in io.read, io.gets and io.wait_readable when another thread closes the IO" do
        result = closing_run(backend, ops, kinds, :thread)
        expect(result).to eq(run: [:value, nil], results: all_ioerror)
      end

      # IO.select blocks the whole thread on Ruby 3.1 (no io_select hook);
      # from 3.3 a select on one IO waits in the loop, which a close ends.
      it "raises IOError in IO.select when another fiber or thread closes the IO",
         **(RUBY_VERSION < "3.3" ? { pending: "Ruby 3.1 has no io_select hook: IO.select blocks the thread" } : {}) do
        fiber = closing_run(backend, [:select], [:pipe], :fiber)
        thread = closing_run(backend, [:select], [:pipe], :thread)
        expected = { run: [:value, nil], results: { %i[select pipe] => [:raised, "IOError"] } }
        expect(fiber: fiber, thread: thread).to eq(fiber: expected, thread: expected)
      end
    end
  end
end
