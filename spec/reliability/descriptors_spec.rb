# frozen_string_literal: true

require "spec_helper"
require_relative "support/reliability_helpers"

RSpec.describe "Reliability: descriptor hygiene" do
  let(:ev) { new_loop }

  def server_on(port = 0, **options, &)
    track_server(Evix::TCPServer.new(ev, "127.0.0.1", port, **options, &))
  end

  # One client connection driven by the loop: connect, send a line, read the
  # reply, close. Returns the reply.
  def client_round_trip(address, message)
    socket = Socket.new(:INET, :STREAM)
    io = ev.wrap(socket, timeout: 5)
    if socket.connect_nonblock(address, exception: false) == :wait_writable
      io.wait_writable
      errno = socket.getsockopt(:SOCKET, :ERROR).int
      raise SystemCallError.new("connect", errno) unless errno.zero?
    end
    io.write(message)
    io.gets
  ensure
    io ? io.close : socket&.close
  end

  describe "10,000 connections opened and closed through Evix::TCPServer" do
    before do
      soft, hard = Process.getrlimit(:NOFILE)
      Process.setrlimit(:NOFILE, [hard, 4096].min, hard) if soft < 1024
    end

    it "leaves no descriptor, watcher or timer behind" do
      total = scaled(Integer(ENV.fetch("EVIX_RELIABILITY_CONNECTIONS", "10000")), 256)
      concurrency = 64
      handled = 0
      server = server_on(idle_timeout: 30) do |client|
        line = client.gets
        client.write(line)
        handled += 1
      end
      address = Addrinfo.tcp("127.0.0.1", server.port)
      run_clients = lambda do |count|
        per_task = count / concurrency
        tasks = Array.new(concurrency) do |t|
          ev.spawn do
            Array.new(per_task) { |i| client_round_trip(address, "c#{t}-#{i}\n") == "c#{t}-#{i}\n" }.count(true)
          end
        end
        tasks.sum(&:wait)
      end
      expect(run_clients.call(concurrency * 2)).to eq(concurrency * 2) # warm-up: lazily allocated state
      run_until(ev) { server.connections.zero? }
      GC.start
      before = fd_count
      took = elapsed { expect(run_clients.call(total)).to eq(total - (total % concurrency)) }
      run_until(ev) { server.connections.zero? }
      GC.start
      expect(fd_count).to eq(before)
      expect(handled).to eq((concurrency * 2) + total - (total % concurrency))
      expect(ev.stats).to include(watchers: 1, timers: 0) # the listener only
      expect(took).to be < 9 unless gc_stress?
      server.close
      ev.run_once(0)
      expect(ev.stats[:watchers]).to eq(0)
      expect(fd_count).to eq(before - 1) # the listener
    end
  end

  describe "EMFILE on accept (RLIMIT_NOFILE lowered in a child)" do
    it "backs off without spinning or crashing, and serves every queued client once descriptors are free, twice" do
      control_r, control_w = IO.pipe
      pid, reports = fork_child do |report|
        control_w.close
        child_loop = Evix::Loop.new
        served = 0
        server = Evix::TCPServer.new(child_loop, "127.0.0.1", 0) do |client|
          client.write(client.gets)
          served += 1
        end
        spares = []
        exhaust = lambda do
          loop { spares << File.open(File::NULL) }
        rescue Errno::EMFILE
          nil
        end
        highest = Dir.children("/proc/self/fd").map(&:to_i).max
        Process.setrlimit(:NOFILE, highest + 16, Process.getrlimit(:NOFILE)[1])
        report.call("port #{server.port}")
        2.times do |round|
          exhaust.call
          report.call("exhausted #{round}")
          control_r.read(1) # the parent has queued its clients
          cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
          iterations0 = child_loop.stats[:iterations]
          stop = child_loop.add_timer(0.5) { child_loop.stop }
          child_loop.run
          stop.cancel
          cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu0
          report.call("starved #{round} cpu=#{cpu.round(4)} " \
                      "iterations=#{child_loop.stats[:iterations] - iterations0} " \
                      "served=#{served}")
          spares.each(&:close)
          spares.clear
          target = (round + 1) * 4
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 4
          child_loop.run_once(0.01) while served < target && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
          report.call("recovered #{round} served=#{served}")
        end
        server.close
        child_loop.close
      end
      control_r.close
      port = Integer(child_line(reports)[/\d+/])
      2.times do |round|
        expect(child_line(reports)).to eq("exhausted #{round}")
        clients = Array.new(4) { |i| tcp_client(port).tap { |c| c.write("round #{round} client #{i}\n") } }
        control_w.write("g")
        starved = child_line(reports)
        cpu = starved[/cpu=([\d.e-]+)/, 1].to_f
        iterations = starved[/iterations=(\d+)/, 1].to_i
        expect(starved).to include("served=#{round * 4}")
        expect(cpu).to be < (gc_stress? ? 1 : 0.15) # under GC.stress each wake-up costs more; iterations tell
        expect(iterations).to be < 100 # a level-triggered listener would make this tens of thousands
        expect(child_line(reports)).to eq("recovered #{round} served=#{(round + 1) * 4}")
        clients.each_with_index do |client, i|
          expect(client.wait_readable(2)).to be_truthy
          expect(client.gets).to eq("round #{round} client #{i}\n")
        end
      end
      status = wait_child(pid)
      expect(status.success?).to be(true), status.inspect
    end
  end

  describe "closing a socket a fiber waits on wakes the waiter with an error" do
    it "Evix::IO closed from another task: a reader and a writer get Evix::ClosedError", timing: true do
      a, b = socket_pair
      fill_up(a)
      io = ev.wrap(a)
      outcomes = []
      ev.spawn do
        io.read
        outcomes << :read_returned
      rescue Evix::ClosedError
        outcomes << :reader
      end
      ev.spawn do
        io.write("y" * 200_000)
        outcomes << :write_returned
      rescue Evix::ClosedError
        outcomes << :writer
      end
      ev.spawn do
        ev.sleep(0.02)
        io.close
      end
      expect(elapsed { ev.run }).to be < 1
      expect(outcomes).to contain_exactly(:reader, :writer)
      expect(ev.stats).to include(watchers: 0, timers: 0)
      expect(b.read_nonblock(10)).to eq("x" * 10) # the peer is still fine
    end

    it "Evix::IO closed from another thread: the waiting reader gets Evix::ClosedError", timing: true do
      a, = socket_pair
      io = ev.wrap(a)
      outcome = nil
      reader = ev.spawn do
        io.read
        outcome = :returned
      rescue Evix::ClosedError => e
        outcome = e
      end
      ev.run_once(0)
      helper_thread do
        sleep 0.02
        io.close
      end
      took = elapsed { run_until(ev, timeout: 3) { !reader.alive? } }
      expect(took).to be < 1
      expect(outcome).to be_a(Evix::ClosedError)
      expect(a.closed?).to be(true)
      expect(ev.stats).to include(watchers: 0, timers: 0)
    end

    it "plain IO under Evix.run: the waiter's IOError names the close, from another fiber and from another thread" do
      results = Evix.run do
        %i[fiber thread].map do |closer|
          a, b = UNIXSocket.pair
          track_io(a, b) # the peer stays referenced: a collected peer would close and make this EOF
          outcome = nil
          Fiber.schedule do
            a.readpartial(10)
            outcome = :returned
          rescue IOError => e
            outcome = e
          end
          if closer == :fiber
            Fiber.schedule { a.close }
          else
            Thread.new { a.close }.join
          end
          deadline = now + 2
          sleep 0.005 while outcome.nil? && now < deadline
          [closer, outcome.class, outcome.respond_to?(:message) ? outcome.message : outcome]
        end
      end
      expect(results.map { |closer, klass, _| [closer, klass] }).to eq([[:fiber, IOError], [:thread, IOError]])
    end
  end
end
