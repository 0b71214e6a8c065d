# frozen_string_literal: true

require "spec_helper"
require_relative "support/reliability_helpers"

RSpec.describe "Reliability: signals and threads" do
  describe "10,000 SIGUSR1s sent to a process running a loop with add_signal" do
    it "runs the block, survives, and the loop still serves a TCP round trip", timing: true do
      pid, reports = fork_child do |report|
        child_loop = Evix::Loop.new
        seen = 0
        last = nil
        child_loop.add_signal(:USR1) do |signo|
          seen += 1
          last = signo
        end
        server = Evix::TCPServer.new(child_loop, "127.0.0.1", 0) do |client|
          while (line = client.gets)
            client.write(line == "stats\n" ? "seen=#{seen} last=#{last}\n" : line)
          end
        end
        child_loop.add_signal(:TERM) do
          server.close
          child_loop.stop
        end
        report.call("port #{server.port}")
        child_loop.run
        child_loop.close
      end
      port = Integer(child_line(reports)[/\d+/])
      client = tcp_client(port)
      trips = 0
      round_trip = lambda do
        client.write("ping #{trips}\n")
        expect(client.wait_readable(3)).to be_truthy
        expect(client.gets).to eq("ping #{trips}\n")
        trips += 1
      end
      flood = helper_thread { 10_000.times { Process.kill(:USR1, pid) } }
      took = elapsed { round_trip.call while flood.alive? }
      round_trip.call # after the flood
      sleep 0.05 # the last signals' bytes may still be in the pipe
      client.write("stats\n")
      expect(client.wait_readable(3)).to be_truthy
      stats = client.gets
      expect(stats).to match(/\Aseen=\d+ last=#{Signal.list["USR1"]}\n\z/)
      expect(stats[/seen=(\d+)/, 1].to_i).to be_between(1, 10_000)
      expect(Process.wait2(pid, Process::WNOHANG)).to be_nil # still alive
      Process.kill(:TERM, pid)
      status = wait_child(pid)
      expect(status.exitstatus).to eq(0), status.inspect
      expect(took).to be < 5
    end
  end

  describe "post hammered by 8 threads x 10,000 calls" do
    Evix.backends.each do |backend|
      it "runs every callback exactly once, in per-thread order (#{backend})" do
        ev = new_loop(backend)
        threads = 8
        per_thread = scaled(10_000, 500)
        log = Array.new(threads) { [] }
        ran = 0
        go = Thread::Queue.new
        posters = Array.new(threads) do |t|
          helper_thread do
            go.pop
            per_thread.times do |i|
              ev.post do
                log[t] << i
                ran += 1
              end
            end
          end
        end
        threads.times { go << true }
        deadline = now + 8
        ev.run_once(0.05) while ran < threads * per_thread && now < deadline
        posters.each(&:join)
        ev.run_once(0) # anything posted after the last check
        expect(ran).to eq(threads * per_thread)
        log.each { |entries| expect(entries).to eq((0...per_thread).to_a) }
        expect(ev.stats[:immediates]).to eq(0)
      end
    end
  end

  describe "wakeup on a closed loop" do
    it "is a no-op from the loop's thread, another thread and a trap handler, even racing close" do
      ev = Evix::Loop.new
      ev.close
      expect(ev.wakeup).to be_nil
      expect(Thread.new { ev.wakeup }.value).to be_nil
      previous = Signal.trap(:USR2) { ev.wakeup }
      begin
        Process.kill(:USR2, Process.pid)
        sleep 0.01
      ensure
        Signal.trap(:USR2, previous || "DEFAULT")
      end
      expect { ev.post {} }.to raise_error(Evix::ClosedError)

      20.times do
        racing = Evix::Loop.new
        wakers = Array.new(3) do
          Thread.new do
            200.times do
              racing.wakeup
              Thread.pass
            end
          end
        end
        Thread.pass
        racing.close
        expect(wakers.map(&:value)).to all(eq(200))
      end
      GC.start # the closed loops' finalizers run with the wakers gone
    end
  end

  describe "an exception raised in a signal block" do
    it "surfaces from run (not from where the signal arrived), and the loop keeps working" do
      ev = new_loop
      raise_line = __LINE__ + 1
      ev.add_signal(:USR2) { raise EvixSpecError, "from the signal block" }
      keep_alive = ev.add_timer(3) {}
      Process.kill(:USR2, Process.pid)
      sleep 0.05 # the signal arrives outside run: nothing may be raised here
      error = nil
      begin
        ev.run
      rescue EvixSpecError => e
        error = e
      end
      expect(error&.message).to eq("from the signal block")
      expect(backtrace_includes?(error, __FILE__, raise_line)).to be(true)
      fired = false
      ev.add_timer(0.01) { fired = true }
      Process.kill(:USR2, Process.pid)
      expect { ev.run }.to raise_error(EvixSpecError)
      keep_alive.cancel
      ev.run
      expect(fired).to be(true)
      ev.remove_signal(:USR2)
    end
  end
end
