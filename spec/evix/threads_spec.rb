# frozen_string_literal: true

require "spec_helper"

RSpec.describe "Evix::Loop and threads" do
  # Runs the block in a new thread; returns [:ok, value] or [:error, exception].
  def in_other_thread
    Thread.new do
      [:ok, yield]
    rescue Exception => e # rubocop:disable Lint/RescueException
      [:error, e]
    end.value
  end

  # Starts a thread that creates its own loop, registers a watcher that never
  # fires plus a 3 s safety timer, signals `ready` and blocks in run. The
  # thread's value is what run returned or the exception it raised.
  def thread_blocked_in_run(backend, ready, state)
    helper_thread do
      Thread.current.report_on_exception = false
      evloop = Evix::Loop.new(backend: backend)
      r, w = IO.pipe
      begin
        evloop.add_io(r, Evix::READ) {}
        evloop.add_timer(3) { evloop.stop }
        ready << true
        evloop.run
        :returned
      rescue EvixSpecError => e
        e
      ensure
        evloop.close
        r.close
        w.close
        state[:cleaned_up] = true
      end
    end
  end

  def wait_until_blocked(thread)
    wait_until { thread.status == "sleep" || !thread.alive? }
    sleep 0.02
  end

  describe "thread affinity" do
    let!(:ev) { new_loop }

    {
      "next_tick" => ->(ev, _io) { ev.next_tick {} },
      "defer" => ->(ev, _io) { ev.defer {} },
      "add_timer" => ->(ev, _io) { ev.add_timer(1) {} },
      "add_io" => ->(ev, io) { ev.add_io(io, Evix::READ) {} },
      "run" => ->(ev, _io) { ev.run },
      "run_once" => ->(ev, _io) { ev.run_once(0) },
      "stop" => ->(ev, _io) { ev.stop },
      "alive?" => ->(ev, _io) { ev.alive? },
      "stats" => ->(ev, _io) { ev.stats },
      "close" => ->(ev, _io) { ev.close }
    }.each do |name, call|
      it "raises Evix::Error mentioning the thread when #{name} is called from another thread" do
        r, = pipe
        status, result = in_other_thread { call.call(ev, r) }
        expect(status).to eq(:error)
        expect(result).to be_a(Evix::Error)
        expect(result.message).to match(/thread/i)
        expect(ev.closed?).to be(false)
        ran = false
        ev.next_tick { ran = true }
        ev.run
        expect(ran).to be(true)
      end
    end

    it "allows post, wakeup and closed? from another thread" do
      ran_on = nil
      status, result = in_other_thread do
        [ev.post { ran_on = Thread.current }, ev.wakeup, ev.closed?]
      end
      expect([status, result]).to eq([:ok, [nil, nil, false]])
      ev.run
      expect(ran_on).to equal(Thread.current)
    end

    it "lets wakeup from another thread on a closed loop be a no-op" do
      ev.close
      expect(in_other_thread { ev.wakeup }).to eq([:ok, nil])
    end
  end

  Evix.backends.each do |backend|
    describe "backend #{backend}" do
      let!(:ev) { new_loop(backend) }

      it "runs every block posted by 4 threads x 2000 exactly once, in per-thread order", timing: true do
        threads = 4
        per_thread = 2000
        results = Array.new(threads) { [] }
        total = 0
        ev.add_io(rescue_pipe(after: 5), Evix::READ) { ev.stop }
        go = Queue.new
        posters = Array.new(threads) do |t|
          Thread.new do
            go.pop
            per_thread.times do |i|
              ev.post do
                results[t] << i
                total += 1
                ev.stop if total == threads * per_thread
              end
            end
          end
        end
        threads.times { go << true }
        took = elapsed { ev.run }
        posters.each(&:join)
        ev.run_once(0) # anything posted after the stop
        expect(total).to eq(threads * per_thread)
        results.each { |seen| expect(seen).to eq((0...per_thread).to_a) }
        expect(took).to be < 5
      end

      it "lets post and wakeup from other threads race close safely" do
        outcomes = Queue.new
        started = Queue.new
        racers = Array.new(4) do
          Thread.new do
            started << true
            posted = 0
            loop do
              ev.post {}
              ev.wakeup
              posted += 1
            end
          rescue Evix::ClosedError
            outcomes << [:closed, posted]
          rescue Exception => e # rubocop:disable Lint/RescueException
            outcomes << [:unexpected, e]
          end
        end
        4.times { started.pop }
        ev.run_once(0.02)
        ev.close
        racers.each { |racer| expect(racer.join(30)).to equal(racer) } # returns as soon as each ends
        results = Array.new(4) { outcomes.pop }
        expect(results.map(&:first)).to all(eq(:closed)), results.inspect
        expect(ev.wakeup).to be_nil
        GC.start
      end

      it "releases the GVL while blocked so other threads run", timing: true do
        ev.add_io(rescue_pipe, Evix::READ) {}
        counter = 0
        spinner = helper_thread do
          loop do
            counter += 1
            sleep 0.001
          end
        end
        wait_until { counter.positive? }
        before = counter
        ev.run_once(0.2)
        spinner.kill
        expect(counter - before).to be > 10
      end

      it "is interrupted promptly by Thread#raise and surfaces the exception", timing: true do
        ready = Queue.new
        state = {}
        thread = thread_blocked_in_run(backend, ready, state)
        ready.pop
        wait_until_blocked(thread)
        t0 = now
        thread.raise(EvixSpecError, "interrupted")
        result = thread.value
        expect(now - t0).to be < 1
        expect(result).to be_a(EvixSpecError)
        expect(result.message).to eq("interrupted")
        expect(state[:cleaned_up]).to be(true)
      end

      it "is ended promptly by Thread#kill", timing: true do
        ready = Queue.new
        state = {}
        thread = thread_blocked_in_run(backend, ready, state)
        ready.pop
        wait_until_blocked(thread)
        t0 = now
        thread.kill
        expect(thread.join(2)).to equal(thread)
        expect(now - t0).to be < 1
        expect(thread.alive?).to be(false)
        expect(state[:cleaned_up]).to be(true)
      end

      it "runs a trap handler that stops the loop while the main thread is blocked in run", timing: true do
        ev.add_io(rescue_pipe, Evix::READ) { ev.stop }
        trapped = false
        old = trap("USR1") do
          trapped = true
          ev.stop
        end
        begin
          helper_thread do
            sleep 0.05
            Process.kill(:USR1, Process.pid)
          end
          took = elapsed { ev.run }
          expect(trapped).to be(true)
          expect(took).to be < 1
        ensure
          trap("USR1", old || "DEFAULT")
        end
      end

      it "runs a block posted from a trap handler while the main thread is blocked in run", timing: true do
        ev.add_io(rescue_pipe, Evix::READ) { ev.stop }
        stopped_by_post = false
        old = trap("USR1") do
          ev.post do
            stopped_by_post = true
            ev.stop
          end
        end
        begin
          helper_thread do
            sleep 0.05
            Process.kill(:USR1, Process.pid)
          end
          took = elapsed { ev.run }
          expect(stopped_by_post).to be(true)
          expect(took).to be < 1
        ensure
          trap("USR1", old || "DEFAULT")
        end
      end

      it "keeps running after a trap handler that does not stop it (EINTR is not an error)", timing: true do
        trapped = 0
        old = trap("USR1") { trapped += 1 }
        begin
          fired_at = nil
          t0 = now
          ev.add_timer(0.2) { fired_at = now }
          helper_thread do
            sleep 0.05
            Process.kill(:USR1, Process.pid)
          end
          ev.run
          expect(trapped).to eq(1)
          expect(fired_at - t0).to be >= 0.195
        ensure
          trap("USR1", old || "DEFAULT")
        end
      end

      it "raises Interrupt promptly on SIGINT (Ctrl-C) while blocked in run", timing: true do
        ev.add_io(rescue_pipe, Evix::READ) { ev.stop }
        old = trap("INT", "DEFAULT") # Ruby's own handler: raise Interrupt in the main thread
        begin
          # The signal is sent only once run has started: sent from outside,
          # it could land before (under GC.stress RSpec's first raise_error
          # loads its matcher for longer than the sleep) and escape the expect.
          ev.next_tick do
            helper_thread do
              sleep 0.05
              Process.kill(:INT, Process.pid)
            end
          end
          t0 = now
          expect { ev.run }.to raise_error(Interrupt)
          expect(now - t0).to be < 1
        ensure
          trap("INT", old || "DEFAULT")
        end
      end

      it "lets Timeout.timeout interrupt a run blocked on a watcher that never fires", timing: true do
        ev.add_io(rescue_pipe, Evix::READ) { ev.stop }
        t0 = now
        expect { Timeout.timeout(0.2) { ev.run } }.to raise_error(Timeout::Error)
        took = now - t0
        expect(took).to be >= 0.15
        expect(took).to be < 1
        ran = false
        ev.next_tick { ran = true }
        ev.run_once(0)
        expect(ran).to be(true)
      end
    end
  end

  # Threads that keep waking up make Ruby set a timer interrupt on whichever
  # thread holds the GVL; one pending when the loop is about to block makes
  # it skip that wait. The last wait's events must not be handed out again.
  describe "while other threads keep taking the GVL" do
    it "calls a watcher only when its fd is ready" do
      ev = new_loop
      r, w = pipe
      stop = false
      busy = Array.new(4) { helper_thread { sleep 0.0001 until stop } }
      helper_thread do
        2000.times do
          sleep 0.0003
          w.write("x")
        end
        w.close
      end
      calls = not_ready = 0
      ev.add_io(r, Evix::READ) do
        calls += 1
        case r.read_nonblock(1, exception: false)
        when :wait_readable then not_ready += 1
        when nil then ev.stop
        end
      end
      ev.run
      stop = true
      busy.each(&:join)
      expect([calls - not_ready, not_ready]).to eq([2001, 0])
    end
  end
end
