# frozen_string_literal: true

require "spec_helper"
require_relative "support/reliability_helpers"

# The failures libuv's and io-event's users reported, one spec (at least)
# each that would catch them here.
RSpec.describe "Reliability: the classic event-loop failures" do
  # Opens pipes until one end gets fd number +fd+ (the lowest free number is
  # always taken first); returns [that IO, its pipe partner] and closes the rest.
  def io_at(number)
    spare = []
    200.times do
      r, w = IO.pipe
      return [r, w].tap { spare.each(&:close) } if r.fileno == number
      return [w, r].tap { spare.each(&:close) } if w.fileno == number

      spare.push(r, w)
    end
    spare.each(&:close)
    raise "could not get fd #{number} again"
  end

  # Iterations the loop made in about +seconds+ of run_once: a loop that
  # blocks makes a handful; a spinning one hundreds of thousands.
  def iterations_during(evloop, seconds)
    before = evloop.stats[:iterations]
    run_for(evloop, seconds)
    evloop.stats[:iterations] - before
  end

  describe "stale events after a watcher is removed" do
    Evix.backends.each do |backend|
      context "with the #{backend} backend" do
        let(:ev) { new_loop(backend) }

        it "never calls a watcher cancelled earlier in the same I/O phase, nor a new one on its reused fd" do
          ra, wa = pipe
          rb, wb = pipe
          wa.write("a")
          wb.write("b")
          calls = []
          watchers = {}
          replacement = nil
          fresh_w = nil
          handler = lambda do |mine, other, other_io|
            calls << mine
            watchers[other].cancel
            fresh_r, fresh_w = IO.pipe
            track_io(fresh_r, fresh_w)
            other_io.reopen(fresh_r) # same fd number, another (not readable) file
            fresh_r.close
            replacement = ev.add_io(other_io, Evix::READ) { calls << :replacement }
          end
          watchers[:a] = ev.add_io(ra, Evix::READ | Evix::ONESHOT) { handler.call(:a, :b, rb) }
          watchers[:b] = ev.add_io(rb, Evix::READ | Evix::ONESHOT) { handler.call(:b, :a, ra) }
          ev.run_once(1)
          expect(calls.size).to eq(1)
          ev.run_once(0.05)
          ev.run_once(0.05)
          expect(calls.size).to eq(1), calls.inspect
          fresh_w.write("now") # the replacement's own readiness does reach it
          ev.run_once(1)
          expect(calls.last).to eq(:replacement)
          replacement.cancel
        end

        it "does not spin or misfire once a watched fd is closed while its file stays open elsewhere (dup)" do
          r, w = pipe
          elsewhere = track_io(r.dup).first # as a forked child or a dup would keep it
          number = r.fileno
          watcher = ev.add_io(r, Evix::READ) {}
          ev.run_once(0) # registered in the kernel
          watcher.cancel
          r.close # the user's close; the loop never closes a user's fd
          reused, reused_w = io_at(number) # a new file on the same number, watched at once
          track_io(reused, reused_w)
          got = []
          ev.add_io(reused, Evix::READ) { got << reused.read_nonblock(10, exception: false) }
          w.write("x") # the old file (still open through the dup) is readable from now on
          expect(iterations_during(ev, 0.3)).to be < 30
          expect(got).to eq([]) # the old file's readiness is not the new one's
          expect(ev.stats[:rebuilds]).to eq(1) if backend == :epoll # the one way to drop it
          reused_w.write("y")
          ev.run_once(1)
          expect(got).to eq(["y"])
          expect(elsewhere.read_nonblock(10)).to eq("x")
        end
      end
    end

    # What a pre-fork server does: the parent reads a request under Evix.run,
    # hands the connection to a forked child and closes its own copy. The
    # parent cannot "stop watching before the close": the scheduler's wait
    # was internal, and its watcher is removed lazily (no epoll_ctl DEL).
    it "does not spin when a socket waited on under Evix.run is handed to a forked child and closed in the parent" do
      spun = isolated(timeout: 8) do
        listener = TCPServer.new("127.0.0.1", 0)
        client = TCPSocket.new("127.0.0.1", listener.addr[1])
        Evix.run do
          conn = listener.accept
          reader = Fiber.schedule { conn.gets } # waits through the scheduler: conn's fd goes to epoll
          client.write("request\n")
          sleep 0.001 while reader.alive?
          pid = fork { Process.kill(:STOP, Process.pid) } # the child keeps the connection open
          conn.close
          client.write("more\n") # readable from now on, for the child
          evloop = Fiber.scheduler.loop
          before = evloop.stats[:iterations]
          sleep 0.3
          iterations = evloop.stats[:iterations] - before
          Process.kill(:KILL, pid)
          Process.wait(pid)
          iterations
        end
      end
      expect(spun).to be < 30 # a blocked loop wakes a few times; a spinning one hundreds of thousands
    end

    it "does not spin after an Evix::IO is closed while its file stays open elsewhere" do
      ev = new_loop
      a, b = socket_pair
      elsewhere = track_io(a.dup).first
      io = ev.wrap(a)
      reader = ev.spawn do
        io.read
      rescue Evix::ClosedError
        :closed
      end
      ev.run_once(0)
      io.close
      expect(reader.wait).to eq(:closed)
      b.write("x")
      expect(iterations_during(ev, 0.3)).to be < 30
      expect(elsewhere.read_nonblock(10)).to eq("x")
    end
  end

  describe "reused fd numbers" do
    Evix.backends.each do |backend|
      context "with the #{backend} backend" do
        let(:ev) { new_loop(backend) }

        it "watches a new file on a closed watcher's fd number (cancelled or not before the close)" do
          [true, false].each do |cancel_first|
            r, w = IO.pipe
            number = r.fileno
            watcher = ev.add_io(r, Evix::READ) {}
            ev.run_once(0)
            watcher.cancel if cancel_first
            r.close
            w.close
            watcher.cancel unless cancel_first # the fd was closed already: not an error
            reused, reused_w = io_at(number)
            track_io(reused, reused_w)
            got = []
            ev.add_io(reused, Evix::READ | Evix::ONESHOT) { got << reused.read_nonblock(10) }
            reused_w.write("z")
            ev.run_once(1)
            expect(got).to eq(["z"]), "cancelled before close: #{cancel_first}"
          end
        end

        it "wakes a fiber waiting with wait_io on the same IO object after IO#reopen put a new file on its fd" do
          r, w = pipe
          first = ev.spawn { ev.wait_io(r, Evix::READ, 1) }
          ev.next_tick { w.write("x") }
          expect(first.wait).to eq(Evix::READ) # the registration is now pinned to r
          r2, w2 = pipe
          r.reopen(r2) # same object, same fd number, another file
          second = ev.spawn { ev.wait_io(r, Evix::READ, 1) }
          ev.add_timer(0.02) { w2.write("y") }
          expect(second.wait).to eq(Evix::READ) # nil: timed out, the new file was never registered
        end
      end
    end

    it "serves a plain socket under Evix.run whose fd number a closed, waited-on socket had" do
      result = Evix.run do
        a, b = UNIXSocket.pair
        reader = Fiber.schedule { a.readpartial(10) }
        b.write("one")
        sleep 0.001 while reader.alive?
        number = a.fileno
        a.close
        b.close
        c, d = UNIXSocket.pair
        c, d = d, c if d.fileno == number
        got = nil
        Fiber.schedule { got = c.readpartial(10) }
        d.write("two")
        deadline = now + 2
        sleep 0.001 while got.nil? && now < deadline
        [c.fileno == number, got]
      ensure
        [c, d].each { |s| s&.close unless s&.closed? }
      end
      expect(result).to eq([true, "two"]).or eq([false, "two"])
    end
  end

  describe "GC crashes under compaction" do
    it "keeps a pinned wait_io registration, its fiber and its IO across GC.compact between two waits" do
      result = isolated do
        ev = Evix::Loop.new
        r, w = IO.pipe
        task = ev.spawn do
          got = []
          2.times do
            got << ev.wait_io(r, Evix::READ)
            got << r.read_nonblock(10)
          end
          got
        end
        ev.run_once(0)
        compact_heap
        w.write("1")
        ev.run_once(0.5)
        churn
        compact_heap
        w.write("2")
        task.wait
      end
      expect(result).to eq([Evix::READ, "1", Evix::READ, "2"])
    end
    # More in gc_compaction_spec.rb: every kind of callback, fiber, post,
    # signal handler and server connection across minor GCs and compaction.
  end

  describe "broken loops after fork" do
    it "leaves the parent's loop and registrations working whatever the child does with it" do
      ev = new_loop
      r, w = pipe
      got = []
      ev.add_io(r, Evix::READ) { got << r.read_nonblock(100) }
      fired = false
      ev.add_timer(0.05) { fired = true }
      ev.run_once(0)
      pid, reports = fork_child do |report|
        results = [-> { ev.run_once(0) }, -> { ev.add_io(r, Evix::READ) {} }, -> { ev.close }].map do |call|
          call.call
          "ok"
        rescue Evix::Error => e
          e.class.name
        end
        r.close # closing the inherited fd must not disturb the parent's registration
        child_loop = Evix::Loop.new
        child_loop.add_io(w, Evix::WRITE | Evix::ONESHOT) { w.write("from child") }
        child_loop.run
        child_loop.close
        report.call(results.join(","))
      end
      expect(child_line(reports)).to eq("Evix::Error,Evix::Error,Evix::Error")
      expect(wait_child(pid).exitstatus).to eq(0)
      ev.run_once(1)
      expect(got).to eq(["from child"])
      w.write("from parent")
      ev.run_once(1)
      expect(got).to eq(["from child", "from parent"])
      run_for(ev, 0.1)
      expect(fired).to be(true)
    end

    it "lets a child forked inside Evix.run exit cleanly (status 0), the parent's waiting fiber unaffected" do
      r, w = pipe
      outcome = Evix.run do
        got = nil
        reader = Fiber.schedule { got = r.read(2) }
        pid = fork do
          $stderr.reopen(File::NULL, "w")
          # Leaves through exit, like most programs: at_exit, finalizers and
          # the scheduler's close at thread exit all run.
        end
        status = Process.wait2(pid)[1]
        w.write("ok")
        sleep 0.005 while reader.alive?
        [status.exitstatus, got]
      end
      expect(outcome).to eq([0, "ok"])
    end
  end

  describe "wake-ups of a closed loop" do
    it "never writes into a descriptor that reused the closed loop's waker number" do
      before = Dir.children("/proc/self/fd").map(&:to_i)
      ev = Evix::Loop.new
      mine = Dir.children("/proc/self/fd").map(&:to_i) - before
      ev.close
      reused = mine.map { |fd| io_at(fd) }
      reused.each { |ios| track_io(*ios) }
      threads = Array.new(2) { Thread.new { 100.times { ev.wakeup } } }
      threads.each(&:join)
      100.times { ev.wakeup }
      expect { ev.post {} }.to raise_error(Evix::ClosedError)
      readable = reused.flatten.select do |io|
        io.wait_readable(0)
      rescue IOError
        false # a write end
      end
      expect(readable).to eq([])
    end
  end

  describe "exceptions escaping" do
    it "from a signal block: raised by run, never at the point where the signal arrived" do
      ev = new_loop
      ev.add_signal(:USR2) { raise EvixSpecError, "signal" }
      ev.add_timer(2) {}
      expect do
        Process.kill(:USR2, Process.pid)
        20.times { Thread.pass } # time for the trap handler to run
        sleep 0.02
      end.not_to raise_error
      expect { ev.run }.to raise_error(EvixSpecError, "signal")
      ev.remove_signal(:USR2)
    end

    it "from two fibers under Evix.run: one error is raised and no dead scheduler is left installed" do
      error = nil
      begin
        Evix.run do
          Fiber.schedule do
            sleep 0.01
            raise EvixSpecError, "first"
          end
          Fiber.schedule do
            sleep 0.02
            raise EvixSpecError, "second"
          end
          Fiber.schedule { sleep 0.03 }
          sleep 0.1
        end
      rescue EvixSpecError => e
        error = e
      end
      leftover = Fiber.scheduler
      if leftover # neutralised, so that this example does not take the suite down with it
        leftover.define_singleton_method(:close) { nil }
        Fiber.set_scheduler(nil)
      end
      expect(error&.message).to eq("first").or eq("second")
      expect(leftover).to be_nil
    end
  end

  describe "two fibers waiting on one IO" do
    # Evix::IO keeps one waiter list per IO and one kernel registration per
    # fd shared by their one-shot watchers: every waiter is resumed when the
    # fd is ready; one reads the data, the others find nothing and wait again.
    it "serves two tasks reading lines from one Evix::IO: every line exactly once, in order, both end at EOF" do
      ev = new_loop
      a, b = socket_pair
      io = ev.wrap(a)
      got = { 0 => [], 1 => [] }
      readers = Array.new(2) do |i|
        ev.spawn do
          while (line = io.gets)
            got[i] << line.chomp.to_i
          end
          :eof
        end
      end
      writer = ev.spawn do
        200.times do |n|
          b.write("#{n}\n")
          ev.sleep(0) if n % 10 == 0
        end
        b.close_write
      end
      writer.wait
      expect(readers.map(&:wait)).to eq(%i[eof eof])
      expect((got[0] + got[1]).sort).to eq((0...200).to_a)
      got.each_value { |lines| expect(lines).to eq(lines.sort) }
      expect(ev.stats).to include(watchers: 0, timers: 0)
    end

    it "wakes both readers of one Evix::IO with Evix::ClosedError when it is closed" do
      ev = new_loop
      a, = socket_pair
      io = ev.wrap(a)
      readers = Array.new(2) do
        ev.spawn do
          io.read
        rescue Evix::ClosedError => e
          e.class
        end
      end
      ev.spawn do
        ev.sleep(0.01)
        io.close
      end
      expect(readers.map(&:wait)).to eq([Evix::ClosedError, Evix::ClosedError])
    end

    it "resumes both fibers in wait_io on one fd when it becomes readable" do
      ev = new_loop
      r, w = pipe
      waits = Array.new(2) { ev.spawn { ev.wait_io(r, Evix::READ, 1) } }
      ev.add_timer(0.01) { w.write("x") }
      expect(waits.map(&:wait)).to eq([Evix::READ, Evix::READ])
    end

    it "serves two fibers reading one plain socket under Evix.run" do
      got = Evix.run do
        a, b = UNIXSocket.pair
        lines = []
        readers = Array.new(2) do
          Fiber.schedule do
            while (line = a.gets)
              lines << line
            end
          end
        end
        50.times do |n|
          b.write("#{n}\n")
          sleep 0.001 if n % 10 == 0
        end
        b.close
        sleep 0.001 while readers.any?(&:alive?)
        a.close
        lines
      end
      expect(got.map(&:to_i).sort).to eq((0...50).to_a)
    end
  end
end
