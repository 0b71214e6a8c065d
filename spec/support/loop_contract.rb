# frozen_string_literal: true

# The behaviour every backend must share (docs/architecture.md: "One iteration of the
# loop", "Watchers and the registry", "Timers", "Errors").
# Used as: it_behaves_like "an evix loop", :epoll
RSpec.shared_examples "an evix loop" do |backend|
  let!(:ev) { new_loop(backend) }

  it "reports the backend it was created with" do
    expect(ev.backend).to eq(backend)
  end

  it "returns the documented values" do
    expect(ev.next_tick {}).to be_nil
    expect(ev.defer {}).to be_nil
    expect(ev.post {}).to be_nil
    expect(ev.wakeup).to be_nil
    expect(ev.add_timer(0) {}).to be_a(Evix::Timer)
    r, = pipe
    watcher = ev.add_io(r, Evix::READ) {}
    expect(watcher).to be_a(Evix::Watcher)
    watcher.cancel
    expect(ev.run).to be_nil
    expect(ev.stop).to be_nil
    expect(ev.closed?).to be(false)
  end

  it "returns from run at once when nothing is pending", timing: true do
    expect(elapsed { ev.run }).to be < 0.5
  end

  describe "phases of one iteration" do
    it "runs immediates, then I/O, then timers, then deferred callbacks" do
      r, w = pipe
      w.write("x")
      log = []
      # Registered in reverse phase order on purpose.
      ev.defer { log << :deferred }
      ev.add_timer(0) { log << :timer }
      ev.add_io(r, Evix::READ) { log << :io }
      ev.next_tick { log << :immediate }
      ev.run_once
      expect(log).to eq(%i[immediate io timer deferred])
    end

    it "runs immediates FIFO and leaves those queued by an immediate for the next iteration" do
      log = []
      ev.next_tick do
        log << 1
        ev.next_tick { log << 3 }
      end
      ev.next_tick { log << 2 }
      ev.run_once
      expect(log).to eq([1, 2])
      ev.run_once
      expect(log).to eq([1, 2, 3])
    end

    it "does not hang run_once on a self-requeueing next_tick", timing: true do
      count = 0
      tick = proc do
        count += 1
        ev.next_tick(&tick)
      end
      ev.next_tick(&tick)
      expect(elapsed { expect(ev.run_once).to be(true) }).to be < 0.5
      expect(count).to eq(1)
      ev.run_once
      expect(count).to eq(2)
    end

    it "still runs timers while a next_tick keeps requeueing itself", timing: true do
      count = 0
      tick = proc do
        count += 1
        ev.next_tick(&tick)
      end
      ev.next_tick(&tick)
      ev.add_timer(0.02) { ev.stop }
      expect(elapsed { ev.run }).to be < 1
      expect(count).to be > 1
    end

    it "runs deferred callbacks FIFO, last, and those queued by a deferred callback next iteration" do
      log = []
      ev.defer do
        log << :d1
        ev.defer { log << :d3 }
      end
      ev.defer { log << :d2 }
      ev.next_tick { log << :immediate }
      ev.run_once
      expect(log).to eq(%i[immediate d1 d2])
      ev.run_once
      expect(log).to eq(%i[immediate d1 d2 d3])
    end

    it "runs a callback deferred by a timer at the end of the same iteration" do
      log = []
      ev.add_timer(0) do
        log << :timer1
        ev.defer { log << :deferred }
      end
      ev.add_timer(0) { log << :timer2 }
      ev.run_once
      expect(log).to eq(%i[timer1 timer2 deferred])
    end
  end

  describe "timers" do
    it "fires no earlier than the delay", timing: true do
      fired_at = nil
      t0 = now
      ev.add_timer(0.05) { fired_at = now }
      ev.run
      expect(fired_at - t0).to be >= 0.045
      expect(fired_at - t0).to be < 0.55
    end

    it "accepts Integer, Float and Rational delays" do
      log = []
      # Added shortest first, so their deadlines are in this order however
      # long each add_timer takes (under GC.stress, longer than the gaps).
      ev.add_timer(0) { log << :integer }
      ev.add_timer(0.01) { log << :float }
      ev.add_timer(Rational(1, 50)) { log << :rational }
      ev.run
      expect(log).to eq(%i[integer float rational])
    end

    it "fires timers in deadline order", timing: true do
      log = []
      ev.add_timer(0.09) { log << :c }
      ev.add_timer(0.03) { log << :a }
      ev.add_timer(0.06) { log << :b }
      ev.run
      expect(log).to eq(%i[a b c])
    end

    it "fires timers with equal delays in insertion order" do
      log = []
      50.times { |i| ev.add_timer(0) { log << i } }
      ev.run
      expect(log).to eq((0...50).to_a)
    end

    it "fires timers created with the same delay inside one callback in insertion order" do
      log = []
      ev.next_tick { 50.times { |i| ev.add_timer(0.01) { log << i } } }
      ev.run
      expect(log).to eq((0...50).to_a)
    end

    it "leaves a timer added during the timer phase with an expired deadline for the next iteration" do
      log = []
      ev.add_timer(0) do
        log << :first
        ev.add_timer(0) { log << :second }
      end
      ev.run_once
      expect(log).to eq([:first])
      ev.run_once
      expect(log).to eq(%i[first second])
    end

    it "re-reads the clock after each timer callback" do
      log = []
      ev.add_timer(0) do
        log << :slow
        sleep 0.05
      end
      ev.add_timer(0.02) { log << :due_meanwhile }
      ev.run_once
      expect(log).to eq(%i[slow due_meanwhile])
      expect(ev.stats[:iterations]).to eq(1)
    end

    it "does not busy-spin on a sub-millisecond timer" do
      fired = false
      ev.add_timer(0.0005) { fired = true }
      ev.run
      expect(fired).to be(true)
      expect(ev.stats[:iterations]).to be <= 5
    end

    it "fires a repeating timer several times and lets it cancel itself", timing: true do
      count = 0
      t0 = now
      last = nil
      timer = ev.add_timer(0.01, repeat: 0.01) do
        count += 1
        last = now
        expect(timer.active?).to be(true)
        timer.cancel if count == 3
      end
      expect(elapsed { ev.run }).to be < 1
      expect(count).to eq(3)
      expect(timer.active?).to be(false)
      expect(last - t0).to be >= 0.025
    end

    it "skips the missed periods of a repeating timer instead of firing a burst" do
      fires = 0
      ev.add_timer(0.02, repeat: 0.02) { fires += 1 }
      ev.next_tick { sleep 0.2 } # blocks the loop for ~10 periods
      ev.add_timer(0.23) { ev.stop }
      ev.run
      expect(fires).to be_between(1, 3)
    end

    it "moves the deadline later with Timer#again" do
      fired_at = nil
      t0 = now
      timer = ev.add_timer(0.02) { fired_at = now }
      expect(timer.again(0.15)).to equal(timer)
      ev.run
      expect(fired_at - t0).to be >= 0.145
    end

    it "moves the deadline earlier with Timer#again", timing: true do
      fired_at = nil
      t0 = now
      timer = ev.add_timer(5) { fired_at = now }
      timer.again(0.02)
      ev.run
      expect(fired_at - t0).to be >= 0.015
      expect(fired_at - t0).to be < 1
    end

    it "re-arms a fired timer and a cancelled timer with Timer#again" do
      count = 0
      timer = ev.add_timer(0) { count += 1 }
      ev.run
      expect(count).to eq(1)
      expect(timer.active?).to be(false)
      timer.again(0.01)
      expect(timer.active?).to be(true)
      ev.run
      expect(count).to eq(2)
      timer.again(0.01)
      timer.cancel
      timer.again(0.01)
      ev.run
      expect(count).to eq(3)
    end

    it "makes cancel idempotent and never runs a cancelled timer", timing: true do
      ran = false
      timer = ev.add_timer(0) { ran = true }
      expect(timer.cancel).to be_nil
      expect(timer.cancel).to be_nil
      expect(elapsed { ev.run }).to be < 0.5
      expect(ran).to be(false)
    end

    it "reports active? through the life of a timer" do
      timer = ev.add_timer(0) {}
      expect(timer.active?).to be(true)
      ev.run
      expect(timer.active?).to be(false)
      other = ev.add_timer(10) {}
      other.cancel
      expect(other.active?).to be(false)
    end

    it "does not keep run alive with an unref'd timer", timing: true do
      ran = false
      timer = ev.add_timer(5) { ran = true }
      expect(timer.unref).to equal(timer)
      expect(timer.ref?).to be(false)
      expect(elapsed { ev.run }).to be < 0.5
      expect(ran).to be(false)
      expect(timer.active?).to be(true)
    end

    it "still fires an unref'd timer while something referenced keeps the loop running" do
      log = []
      ev.add_timer(0.01) { log << :unrefd }.unref
      ev.add_timer(0.05) { log << :refd }
      ev.run
      expect(log).to eq(%i[unrefd refd])
    end

    it "keeps run alive again after Timer#ref" do
      ran = false
      timer = ev.add_timer(0.02) { ran = true }
      timer.unref
      expect(timer.ref).to equal(timer)
      expect(timer.ref?).to be(true)
      ev.run
      expect(ran).to be(true)
    end
  end

  describe "I/O watchers" do
    it "calls a READ watcher on a pipe once data arrives" do
      r, w = pipe
      got = []
      data = nil
      watcher = ev.add_io(r, Evix::READ) do |events|
        got << events
        data = r.read_nonblock(100)
        watcher.cancel
      end
      expect(ev.run_once(0.02)).to be(true)
      expect(got).to eq([])
      w.write("hello")
      ev.run
      expect(got).to eq([Evix::READ])
      expect(data).to eq("hello")
    end

    it "accepts an Integer fd" do
      r, w = pipe
      got = []
      watcher = ev.add_io(r.fileno, Evix::READ) do |events|
        got << events
        watcher.cancel
      end
      w.write("x")
      ev.run
      expect(got).to eq([Evix::READ])
    end

    it "accepts an object that responds to to_io" do
      r, w = pipe
      wrapper = Struct.new(:io) do
        def to_io
          io
        end
      end.new(r)
      got = []
      watcher = ev.add_io(wrapper, Evix::READ) do |events|
        got << events
        watcher.cancel
      end
      w.write("x")
      ev.run
      expect(got).to eq([Evix::READ])
    end

    it "calls a WRITE watcher on a writable pipe" do
      _r, w = pipe
      got = []
      watcher = ev.add_io(w, Evix::WRITE) do |events|
        got << events
        watcher.cancel
      end
      ev.run
      expect(got).to eq([Evix::WRITE])
    end

    it "passes READ|WRITE to a watcher interested in both when both are ready" do
      a, b = socket_pair
      b.write("x")
      got = []
      watcher = ev.add_io(a, Evix::READ | Evix::WRITE) do |events|
        got << events
        watcher.cancel
      end
      ev.run
      expect(got).to eq([Evix::READ | Evix::WRITE])
    end

    it "calls a ONESHOT watcher once and makes it inactive inside its own block", timing: true do
      r, w = pipe
      w.write("x") # never read: a persistent watcher would fire forever
      calls = 0
      active_inside = nil
      watcher = ev.add_io(r, Evix::READ | Evix::ONESHOT) do
        calls += 1
        active_inside = watcher.active?
      end
      expect(elapsed { ev.run }).to be < 0.5
      expect(calls).to eq(1)
      expect(active_inside).to be(false)
      expect(watcher.active?).to be(false)
      ev.run_once(0.03)
      expect(calls).to eq(1)
    end

    it "calls every READ watcher on one fd" do
      r, w = pipe
      w.write("x")
      got = []
      first = ev.add_io(r, Evix::READ) { |events| got << [:first, events] }
      ev.add_io(r, Evix::READ) { |events| got << [:second, events] }
      ev.run_once
      expect(got).to contain_exactly([:first, Evix::READ], [:second, Evix::READ])
      first.cancel
      got.clear
      ev.run_once
      expect(got).to eq([[:second, Evix::READ]])
    end

    it "gives a READ and a WRITE watcher on one socket each its own interest" do
      a, b = socket_pair
      got = { read: [], write: [] }
      ev.add_io(a, Evix::READ) { |events| got[:read] << events }
      ev.add_io(a, Evix::WRITE) { |events| got[:write] << events }
      ev.run_once
      expect(got).to eq(read: [], write: [Evix::WRITE])
      b.write("x")
      ev.run_once
      expect(got).to eq(read: [Evix::READ], write: [Evix::WRITE, Evix::WRITE])
    end

    it "keeps the remaining watcher on an fd working after the other one is cancelled" do
      a, b = socket_pair
      got = []
      writer = ev.add_io(a, Evix::WRITE) {}
      reader = ev.add_io(a, Evix::READ) do |events|
        got << events
        a.read_nonblock(10)
      end
      writer.cancel
      ev.run_once(0.02)
      expect(got).to eq([])
      b.write("x")
      ev.run_once(1)
      expect(got).to eq([Evix::READ])
      reader.cancel
    end

    it "wakes a READ watcher on hang-up so the block sees EOF", timing: true do
      r, w = pipe
      got = []
      eof = :not_read
      watcher = ev.add_io(r, Evix::READ) do |events|
        got << events
        eof = r.read_nonblock(10, exception: false)
        watcher.cancel
      end
      ev.run_once(0.02)
      expect(got).to eq([])
      w.close
      expect(elapsed { ev.run }).to be < 1
      expect(got).to eq([Evix::READ])
      expect(eof).to be_nil
    end

    it "wakes a WRITE watcher on error (reader gone, pipe full)", timing: true do
      r, w = pipe
      loop { break if w.write_nonblock("x" * 65_536, exception: false) == :wait_writable }
      got = []
      watcher = ev.add_io(w, Evix::WRITE) do |events|
        got << events
        watcher.cancel
      end
      ev.run_once(0.02)
      expect(got).to eq([])
      r.close
      expect(elapsed { ev.run }).to be < 1
      expect(got).to eq([Evix::WRITE])
    end

    it "never calls a watcher cancelled earlier in the same I/O phase" do
      a1, b1 = socket_pair
      a2, b2 = socket_pair
      b1.write("x")
      b2.write("x")
      calls = []
      watchers = {}
      watchers[1] = ev.add_io(a1, Evix::READ) do
        calls << 1
        watchers[2].cancel
      end
      watchers[2] = ev.add_io(a2, Evix::READ) do
        calls << 2
        watchers[1].cancel
      end
      ev.run_once(1)
      ev.run_once(0.02)
      expect(calls).not_to be_empty
      expect(calls.uniq.size).to eq(1)
    end

    it "drops a stale event for a watcher whose fd was closed and reused in the same iteration" do
      a1, b1 = socket_pair
      a2, b2 = socket_pair
      b1.write("x")
      b2.write("x")
      ios = { 1 => a1, 2 => a2 }
      watchers = {}
      calls = []
      new_watcher_calls = []
      reused = nil
      first = nil
      on_ready = lambda do |me, other|
        calls << me
        next if first

        first = me
        old_fd = ios[other].fileno
        watchers[other].cancel
        ios[other].close
        # Open pipes until one lands on the freed fd number (lowest-free allocation).
        64.times do
          r, w = pipe
          next unless [r.fileno, w.fileno].include?(old_fd)

          reused = r.fileno == old_fd ? r : w
          break
        end
        # Nothing was written to the new pipe: any call is a stale event.
        ev.add_io(reused, Evix::READ) { |events| new_watcher_calls << events } if reused
      end
      watchers[1] = ev.add_io(a1, Evix::READ) { on_ready.call(1, 2) }
      watchers[2] = ev.add_io(a2, Evix::READ) { on_ready.call(2, 1) }
      ev.run_once(1)
      ev.run_once(0.02)
      expect(first).not_to be_nil
      expect(calls.uniq).to eq([first])
      expect(reused).not_to be_nil, "could not reuse the closed fd number"
      expect(new_watcher_calls).to eq([])
    end
  end

  describe "stop and run modes" do
    it "ends run after the current iteration when stop is called", timing: true do
      r, = pipe
      ev.add_io(r, Evix::READ) {} # keeps the loop alive forever
      log = []
      ev.next_tick do
        log << :tick
        ev.stop
        ev.next_tick { log << :next_iteration }
      end
      ev.add_timer(0) { log << :timer }
      ev.defer { log << :deferred }
      expect(elapsed { ev.run }).to be < 0.5
      expect(log).to eq(%i[tick timer deferred])
      ev.run_once(0)
      expect(log.last).to eq(:next_iteration)
    end

    it "runs normally again after a stopped run" do
      r, = pipe
      ev.add_io(r, Evix::READ) {}
      ev.next_tick { ev.stop }
      ev.run
      fired = false
      ev.add_timer(0.03) do
        fired = true
        ev.stop
      end
      ev.run
      expect(fired).to be(true)
    end

    it "does not block in run(:nowait) even with a long timer pending", timing: true do
      ran = false
      ev.add_timer(10) {}
      r, = pipe
      ev.add_io(r, Evix::READ) {}
      ev.next_tick { ran = true }
      # Blocking would wait 10 s (the timer) or forever (the pipe).
      expect(elapsed { expect(ev.run(:nowait)).to be_nil }).to be < 1
      expect(ran).to be(true)
      expect(elapsed { ev.run(:nowait) }).to be < 1
    end

    it "runs exactly one iteration in run(:once), blocking for the next timer", timing: true do
      fired = 0
      t0 = now # before the timer is armed: it fires no earlier than 0.03 s from here
      ev.add_timer(0.03) { fired += 1 }
      ev.add_timer(10) {}
      expect(ev.run(:once)).to be_nil
      took = now - t0
      expect(fired).to eq(1)
      expect(took).to be >= 0.025
      expect(took).to be < 0.5
      expect(ev.stats[:iterations]).to eq(1)
    end

    it "returns from run_once(timeout) within the timeout", timing: true do
      r, = pipe
      ev.add_io(r, Evix::READ) {}
      took = elapsed { expect(ev.run_once(0.05)).to be(true) }
      expect(took).to be >= 0.045
      expect(took).to be < 0.5
      took = elapsed { ev.run_once(Rational(1, 20)) }
      expect(took).to be >= 0.045
      expect(took).to be < 0.5
      expect(elapsed { ev.run_once(0) }).to be < 1 # blocking would wait forever
    end

    it "returns from run_once early when a timer is due before the timeout", timing: true do
      fired = false
      ev.add_timer(0.02) { fired = true }
      took = elapsed { expect(ev.run_once(2)).to be(false) }
      expect(fired).to be(true)
      expect(took).to be < 1
    end

    it "returns false from run_once once nothing referenced is left" do
      ev.next_tick {}
      expect(ev.run_once).to be(false)
      ev.add_timer(10) {}.unref
      expect(ev.run_once(0)).to be(false)
    end

    it "reports alive? for each kind of referenced work" do
      r, = pipe
      expect(ev.alive?).to be(false)
      ev.next_tick {}
      expect(ev.alive?).to be(true)
      ev.run
      expect(ev.alive?).to be(false)
      ev.defer {}
      expect(ev.alive?).to be(true)
      ev.run_once(0)
      expect(ev.alive?).to be(false)
      timer = ev.add_timer(10) {}
      expect(ev.alive?).to be(true)
      timer.unref
      expect(ev.alive?).to be(false)
      timer.ref
      expect(ev.alive?).to be(true)
      timer.cancel
      expect(ev.alive?).to be(false)
      watcher = ev.add_io(r, Evix::READ) {}
      expect(ev.alive?).to be(true)
      watcher.unref
      expect(ev.alive?).to be(false)
      watcher.ref
      expect(ev.alive?).to be(true)
      watcher.cancel
      expect(ev.alive?).to be(false)
    end

    it "counts pending work and iterations in stats" do
      keys = %i[immediates deferred timers watchers iterations]
      stats = ev.stats
      expect(stats).to be_a(Hash)
      expect(stats.keys).to include(*keys)
      expect(stats.values_at(*keys)).to eq([0, 0, 0, 0, 0])
      r, = pipe
      ev.next_tick {}
      ev.defer {}
      timer = ev.add_timer(10) {}
      watcher = ev.add_io(r, Evix::READ) {}
      expect(ev.stats).to include(immediates: 1, deferred: 1, timers: 1, watchers: 1, iterations: 0)
      ev.run_once(0)
      expect(ev.stats).to include(immediates: 0, deferred: 0, timers: 1, watchers: 1, iterations: 1)
      timer.cancel
      watcher.cancel
      expect(ev.stats).to include(timers: 0, watchers: 0)
      ev.run_once(0)
      expect(ev.stats[:iterations]).to eq(2)
    end
  end

  describe "other threads" do
    it "runs a block posted from another thread on the loop thread and wakes a blocked run", timing: true do
      quiet = rescue_pipe
      ev.add_io(quiet, Evix::READ) { ev.stop }
      ran_on = nil
      poster = helper_thread do
        sleep 0.05
        ev.post do
          ran_on = Thread.current
          ev.stop
        end
      end
      took = elapsed { ev.run }
      poster.join
      expect(ran_on).to equal(Thread.current)
      expect(took).to be < 1
    end

    it "wakes a blocked run_once with wakeup from another thread", timing: true do
      quiet = rescue_pipe
      ev.add_io(quiet, Evix::READ) {}
      helper_thread do
        sleep 0.05
        ev.wakeup
      end
      took = elapsed { ev.run_once }
      expect(took).to be >= 0.04
      expect(took).to be < 1
    end
  end

  describe "exceptions in callbacks" do
    let(:error) { EvixSpecError.new("boom") }

    def expect_same_error(raised, line)
      expect(raised).to equal(error)
      message = "backtrace lacks line #{line}: #{raised.backtrace&.first(5)}"
      expect(backtrace_includes?(raised, __FILE__, line)).to be(true), message
    end

    it "propagates a next_tick exception unchanged and runs the rest next time" do
      log = []
      line = nil
      ev.next_tick do
        line = __LINE__ + 1
        raise error
      end
      ev.next_tick { log << :second }
      expect { ev.run }.to raise_error(EvixSpecError) { |raised| expect_same_error(raised, line) }
      expect(log).to eq([])
      ev.run
      expect(log).to eq([:second])
    end

    it "propagates a timer exception unchanged and runs the rest next time" do
      log = []
      line = nil
      ev.add_timer(0) do
        line = __LINE__ + 1
        raise error
      end
      ev.add_timer(0) { log << :second }
      expect { ev.run }.to raise_error(EvixSpecError) { |raised| expect_same_error(raised, line) }
      ev.run
      expect(log).to eq([:second])
    end

    it "keeps a repeating timer armed when its block raises" do
      count = 0
      timer = ev.add_timer(0.01, repeat: 0.01) do
        count += 1
        raise error if count == 1

        timer.cancel
      end
      expect { ev.run }.to raise_error(error)
      expect(timer.active?).to be(true)
      ev.run
      expect(count).to eq(2)
    end

    it "propagates an I/O callback exception unchanged and runs the rest next time" do
      r1, w1 = pipe
      r2, w2 = pipe
      w1.write("x")
      w2.write("x")
      log = []
      line = nil
      raised = false
      watchers = []
      [r1, r2].each_with_index do |r, i|
        watchers << ev.add_io(r, Evix::READ) do
          r.read_nonblock(10)
          watchers[i].cancel
          log << i
          unless raised
            raised = true
            line = __LINE__ + 1
            raise error
          end
        end
      end
      ev.add_timer(0) { log << :timer }
      expect { ev.run }.to raise_error(EvixSpecError) { |e| expect_same_error(e, line) }
      expect(log.size).to eq(1)
      ev.run
      expect(log).to contain_exactly(0, 1, :timer)
    end

    it "propagates a deferred callback exception unchanged and runs the rest next time" do
      log = []
      line = nil
      ev.defer do
        line = __LINE__ + 1
        raise error
      end
      ev.defer { log << :second }
      expect { ev.run }.to raise_error(EvixSpecError) { |raised| expect_same_error(raised, line) }
      ev.run
      expect(log).to eq([:second])
    end

    it "propagates a posted block's exception unchanged and runs the rest next time" do
      log = []
      line = nil
      Thread.new do
        ev.post do
          line = __LINE__ + 1
          raise error
        end
        ev.post { log << :second }
      end.join
      expect { ev.run }.to raise_error(EvixSpecError) { |raised| expect_same_error(raised, line) }
      ev.run
      expect(log).to eq([:second])
    end

    it "lets throw/catch cross run and stays usable" do
      result = catch(:evix_done) do
        ev.add_timer(0) { throw :evix_done, 42 }
        ev.run
        :not_thrown
      end
      expect(result).to eq(42)
      result = catch(:evix_done) do
        ev.next_tick { throw :evix_done, 43 }
        ev.run
        :not_thrown
      end
      expect(result).to eq(43)
      ran = false
      ev.next_tick { ran = true }
      ev.run
      expect(ran).to be(true)
    end
  end
end
