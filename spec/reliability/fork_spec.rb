# frozen_string_literal: true

require "spec_helper"
require_relative "support/reliability_helpers"

RSpec.describe "Reliability: fork" do
  let(:workers) { 4 }

  # Holds the port: bound with SO_REUSEPORT but not listening, so the kernel
  # never hands it a connection.
  def reserve_port
    socket = Socket.new(:INET, :STREAM)
    track_io(socket)
    socket.setsockopt(:SOCKET, :REUSEADDR, true)
    socket.setsockopt(:SOCKET, :REUSEPORT, true)
    socket.bind(Addrinfo.tcp("127.0.0.1", 0))
    socket.local_address.ip_port
  end

  # Connects until every worker pid was seen (SO_REUSEPORT hashes the
  # 4-tuple, so each new client port is a new draw).
  def collect_pids(port, expected, attempts: 400)
    seen = Hash.new(0)
    attempts.times do
      break if seen.size == expected

      client = TCPSocket.new("127.0.0.1", port)
      client.write("pid?\n")
      line = client.gets
      seen[Integer(line)] += 1 if line
      client.close
    end
    seen
  end

  # In a worker: every use of the parent's loop must raise Evix::Error.
  def misuse(parent_loop)
    [
      -> { parent_loop.run_once(0) },
      -> { parent_loop.add_timer(0) {} },
      -> { parent_loop.spawn {}.wait },
      -> { Evix::TCPServer.new(parent_loop, "127.0.0.1", 0) {} }
    ].map do |call|
      call.call
      "none"
    rescue Evix::Error => e
      e.class.name
    end
  end

  def start_worker(parent_loop, port)
    fork_child do |report|
      misused = misuse(parent_loop)
      worker_loop = Evix::Loop.new
      served = 0
      server = Evix::TCPServer.new(worker_loop, "127.0.0.1", port, reuse_port: true) do |client|
        client.write("#{Process.pid}\n") if client.gets
        served += 1
      end
      worker_loop.add_signal(:TERM) do
        server.close
        worker_loop.stop
      end
      report.call("ready #{misused.join(",")}")
      worker_loop.run
      worker_loop.close
      exit!(served.positive? ? 0 : 3)
    end
  end

  # A worker: its own loop and its own reuse_port listener on +port+; it
  # answers each connection with its pid, and stops on SIGTERM.
  def start_worker(parent_loop, port, report)
    fork do
      misused = misuse(parent_loop)
      worker_loop = Evix::Loop.new
      served = 0
      server = Evix::TCPServer.new(worker_loop, "127.0.0.1", port, reuse_port: true) do |client|
        client.write("#{Process.pid}\n") if client.gets
        served += 1
      end
      worker_loop.add_signal(:TERM) do
        server.close
        worker_loop.stop
      end
      report.write("#{Process.pid} #{misused.join(",")}\n")
      worker_loop.run
      worker_loop.close
      exit!(served.positive? ? 0 : 3)
    rescue Exception # rubocop:disable Lint/RescueException -- the exit status says it
      exit!(4)
    end
  end

  # Reaps +pids+ with Process.wait2 in fibers under Evix.run while another
  # fiber keeps ticking. Returns [{pid => [waited pid, exit status]}, ticks].
  def reap_under_scheduler(pids)
    reaped = {}
    ticks = 0
    Evix.run do
      done = false
      Fiber.schedule do
        until done
          sleep 0.005
          ticks += 1
        end
      end
      pids.each { |pid| Fiber.schedule { reaped[pid] = Process.wait2(pid) } }
      pids.each { |pid| Process.kill(:TERM, pid) } # rubocop:disable Style/CombinableLoops -- every wait first
      sleep 0.01 until reaped.size == pids.size
      done = true
    end
    [reaped.transform_values { |(waited, status)| [waited, status.exitstatus] }, ticks]
  end

  # The whole scenario runs in an isolated child (the "server"), so that a
  # hang in the scheduler fails this example instead of hanging the suite.
  def pre_fork_server(warm_pool:)
    isolated(timeout: 8) do
      Evix.run { Evix.offload { :warm } } if warm_pool # the offload pool has an idle thread now
      parent_loop = Evix::Loop.new
      parent_loop.add_timer(10) {}
      port = reserve_port
      reader, writer = IO.pipe
      pids = Array.new(workers) { start_worker(parent_loop, port, writer) }
      ready = Array.new(workers) { reader.gets.split }
      seen = collect_pids(port, workers)
      reaped, ticks = reap_under_scheduler(pids)
      { pids: pids, ready: ready, seen: seen, reaped: reaped, ticks: ticks,
        parent_loop_works: parent_loop.run_once(0) }
    end
  end

  [false, true].each do |warm_pool|
    it "forks 4 workers on one reuse_port: port, each with its own loop, and all of them serve; the parent's " \
       "loop raises Evix::Error in them; Process.wait2 under Evix.run reaps each#{if warm_pool
                                                                                    " (warm offload pool)"
                                                                                  end}" do
      result = pre_fork_server(warm_pool: warm_pool)
      pids = result[:pids]
      expect(result[:ready].map { |pid, _| Integer(pid) }).to match_array(pids)
      expect(result[:ready].map(&:last)).to all(eq((["Evix::Error"] * 4).join(",")))
      expect(result[:seen].keys).to match_array(pids), "responses per pid: #{result[:seen].inspect}"
      expect(result[:reaped].keys).to match_array(pids)
      result[:reaped].each do |pid, (waited, exitstatus)|
        expect(waited).to eq(pid)
        expect(exitstatus).to eq(0), "worker #{pid} exited #{exitstatus}"
      end
      expect(result[:ticks]).to be > 0 # other fibers ran while the workers were waited for
      expect(result[:parent_loop_works]).to be(true)
    end
  end

  it "returns each concurrent Evix.offload its own result when the pool already has an idle thread" do
    got = isolated(timeout: 5) do
      Evix.run { Evix.offload { :warm } }
      results = {}
      Evix.run do
        8.times { |i| Fiber.schedule { results[i] = Evix.offload { i * 10 } } }
      end
      results
    end
    expect(got).to eq(Array.new(8) { |i| [i, i * 10] }.to_h)
  end

  # Ruby makes the forking fiber the child's root fiber: Evix.run's own
  # frames are not on its stack, so the child cannot return from Evix.run.
  # What evix owes it is a clean end: the block's fiber ends, at_exit runs,
  # exit status 0 (1 with the block's exception), no Evix::Error from the
  # parent's loop.
  [true, false].each do |sibling|
    it "ends a child forked without a block inside Evix.run when the block ends, cleanly, as Ruby ends a root " \
       "fiber (#{sibling ? "another fiber scheduled" : "the block alone"})" do
      run = run_ruby(<<~RUBY, timeout: 5)
        def say(line) = $stdout.write("\#{line}\n") # one write: both processes print
        at_exit { say "at_exit in \#{Process.pid == PARENT ? "parent" : "child"}: \#{$!.inspect}" }
        PARENT = Process.pid
        status = nil
        result = Evix.run do
          Fiber.schedule { sleep 0.05 } if #{sibling}
          pid = fork
          say "block ends in \#{pid ? "parent" : "child"}"
          status = Process.wait2(pid)[1].exitstatus if pid
          :value
        end
        say "returned \#{result.inspect}, child exit \#{status}"
      RUBY
      expect(run.timed_out).to be(false)
      expect(run.err).to eq("")
      expect(run.out.lines.map(&:chomp)).to contain_exactly(
        "block ends in parent", "block ends in child", "at_exit in child: nil",
        "returned :value, child exit 0", "at_exit in parent: nil"
      )
    end
  end

  it "keeps the parent's Evix.run working, and lets a child forked inside it block and run its own loop" do
    outcome = isolated(timeout: 5) do
      r, w = IO.pipe
      er, ew = IO.pipe
      Evix.run do
        got = nil
        reader = Fiber.schedule { got = r.read(3) }
        pid = fork do
          $stderr.reopen(File::NULL, "w")
          failures = []
          begin
            fresh = Evix::Loop.new
            fresh.add_timer(0.005) {}
            fresh.run
          rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
            failures << "new Evix::Loop#run: #{e.class}: #{e.message}"
          end
          begin
            Evix.run { sleep 0.005 }
          rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
            failures << "Evix.run: #{e.class}: #{e.message}"
          end
          ew.write(failures.join("\n"))
          exit!(failures.empty? ? 0 : 1)
        end
        ew.close
        status = Process.wait2(pid)[1]
        w.write("abc")
        sleep 0.01 while reader.alive?
        [status.exitstatus, got, er.read]
      end
    end
    status, got, failures = outcome
    expect(got).to eq("abc") # the parent's fibers are unaffected
    expect(failures).to eq(""), "in the child:\n#{failures}"
    expect(status).to eq(0)
  end
end
