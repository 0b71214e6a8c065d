# frozen_string_literal: true

require "spec_helper"
require "open3"
require "rbconfig"
require "set"
require "tempfile"

# An Evix::Workers parent in a Ruby process of its own (and process group, so
# that nothing it forks outlives the example), started from +code+, which
# prints the port on its first line.
class WorkersProcess < ServerProcess
  def initialize(code, **options)
    super("the workers", ["-revix", "-e", code], ready: /\A(\d+)\z/, pgroup: true, **options)
  end

  # Opens a connection and returns the first line the worker sends (its pid).
  def worker_pid(timeout: 5)
    socket = Socket.tcp("127.0.0.1", port, connect_timeout: timeout)
    Integer(LineSocket.new(socket).gets(timeout: timeout))
  ensure
    socket&.close
  end

  # Connects until +count+ distinct worker pids (other than +except+) have
  # answered; fails after +timeout+ seconds.
  def distinct_worker_pids(count, except: [], timeout: 10)
    deadline = LineSocket.now + timeout
    seen = Set.new
    seen << worker_pid until (seen - except).size >= count || LineSocket.now > deadline
    raise "only #{(seen - except).to_a} answered in #{timeout}s (wanted #{count})" if (seen - except).size < count

    seen - except
  end

  # The pids whose parent is +parent+ (read from /proc).
  def self.children_of(parent)
    Dir.glob("/proc/[0-9]*/stat").filter_map do |path|
      ppid = File.read(path).split(") ").last.split[1]
      Integer(File.basename(File.dirname(path))) if Integer(ppid) == parent
    rescue Errno::ENOENT, Errno::ESRCH
      nil
    end
  end

  # The parent's live children: its workers.
  def children
    WorkersProcess.children_of(pid)
  end

  # Waits until the children are exactly +expected+ (a block, given the
  # list); fails after +timeout+.
  def wait_for_children(timeout: 10, &expected)
    deadline = LineSocket.now + timeout
    until expected.call(list = children)
      raise "children still #{list} after #{timeout}s\n#{stderr}" if LineSocket.now > deadline

      sleep 0.02
    end
    list
  end
end

RSpec.describe Evix::Workers do
  # A zombie (exited, not reaped yet by whoever adopted it) is not alive.
  def alive?(pid)
    File.read("/proc/#{pid}/stat").split(") ").last.split.first != "Z"
  rescue Errno::ENOENT, Errno::ESRCH
    false
  end

  # Workers whose connections get the worker's pid as their first line.
  def pid_server(count, timeout: 2, setup: "")
    <<~RUBY
      workers = Evix::Workers.new("127.0.0.1", 0, count: #{count}, timeout: #{timeout}) do |loop, listener|
        #{setup}
        Evix::TCPServer.new(loop, listener) { |client| client.write("\#{Process.pid}\\n") }
      end
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
  end

  it "serves one listener from every one of its workers, each a child of the parent" do
    WorkersProcess.run(pid_server(3)) do |parent|
      pids = parent.distinct_worker_pids(3)
      expect(pids.size).to eq(3)
      expect(pids).not_to include(parent.pid)
      expect(parent.children).to match_array(pids.to_a)
    end
  end

  it "replaces a worker killed with SIGKILL: a new pid serves and the count is back to N" do
    WorkersProcess.run(pid_server(2)) do |parent|
      before = parent.distinct_worker_pids(2)
      victim = before.first
      Process.kill(:KILL, victim)
      now = parent.wait_for_children { |list| list.size == 2 && !list.include?(victim) }
      newcomer = (now - before.to_a).first
      expect(newcomer).not_to be_nil
      expect(parent.distinct_worker_pids(1, except: before.to_a).to_a).to eq([newcomer])
      expect(parent.stderr).to match(/worker #{victim} was killed by SIGKILL/)
    end
  end

  it "backs off when every new worker dies at once: a crash loop does not spin" do
    code = <<~RUBY
      workers = Evix::Workers.new("127.0.0.1", 0, count: 1) { raise "broken worker" }
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
    WorkersProcess.run(code) do |parent|
      sleep 2
      crashes = parent.stderr.scan(/worker \d+ failed: RuntimeError: broken worker/).size
      # With backoff (0.1 s, doubling) about 5 fit in 2 s; without, hundreds.
      expect(crashes).to be_between(2, 12)
      expect(parent.stderr).to match(/starting another in 0\.[1-9]/)
    end
  end

  it "reports failure (run is false, exit 1) when every worker crashed in its setup block" do
    code = <<~RUBY
      workers = Evix::Workers.new("127.0.0.1", 0, count: 2) { raise "broken worker" }
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
    WorkersProcess.run(code) do |parent|
      sleep 0.05 until parent.stderr.scan(/failed: RuntimeError: broken worker/).size >= 2
      parent.signal(:TERM)
      status = parent.wait
      expect(status.exitstatus).to eq(1), parent.stderr
    end
  end

  it "drains on SIGTERM: an in-flight connection finishes, the workers exit, the parent exits 0" do
    code = <<~RUBY
      workers = Evix::Workers.new("127.0.0.1", 0, count: 2, timeout: 5) do |loop, listener|
        Evix::TCPServer.new(loop, listener) do |client|
          client.gets
          client.write("started \#{Process.pid}\\n")
          loop.sleep(0.5)
          client.write("done\\n")
        end
      end
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
    WorkersProcess.run(code) do |parent|
      workers = parent.wait_for_children { |list| list.size == 2 }
      client = LineSocket.new(Socket.tcp("127.0.0.1", parent.port, connect_timeout: 5))
      client.puts("go")
      expect(client.gets(timeout: 5)).to match(/\Astarted \d+\z/)
      parent.signal(:TERM)
      expect(client.gets(timeout: 5)).to eq("done")
      expect(client.gets(timeout: 5)).to be_nil
      expect(parent.wait.exitstatus).to eq(0)
      expect(workers.select { |pid| alive?(pid) }).to eq([])
    ensure
      client&.close
    end
  end

  it "drains on SIGINT too, quietly" do
    WorkersProcess.run(pid_server(2)) do |parent|
      workers = parent.distinct_worker_pids(2)
      parent.signal(:INT)
      expect(parent.wait.exitstatus).to eq(0)
      expect(workers.select { |pid| alive?(pid) }).to eq([])
      expect(parent.stderr).to eq("")
    end
  end

  it "force-kills a worker still running at the one deadline and exits non-zero" do
    code = <<~RUBY
      workers = Evix::Workers.new("127.0.0.1", 0, count: 2, timeout: 0.3) do |loop, listener|
        Evix::TCPServer.new(loop, listener) do |client|
          client.write("\#{Process.pid}\\n")
          sleep 30 # Kernel#sleep outside Evix.run blocks this worker's whole loop: it cannot drain
        end
      end
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
    WorkersProcess.run(code) do |parent|
      stuck = parent.worker_pid
      all = parent.wait_for_children { |list| list.size == 2 }
      parent.signal(:TERM)
      status = parent.wait(timeout: 8)
      expect(status.exitstatus).to eq(1)
      expect(all.select { |pid| alive?(pid) }).to eq([])
      expect(parent.stderr).to match(/killed worker #{stuck} \(SIGKILL\): still running at the drain deadline/)
    end
  end

  it "restarts workers one at a time on SIGHUP, each new one ready before an old one drains, refusing nothing" do
    log = Tempfile.new(["evix-workers", ".log"])
    # Each new worker takes 0.3 s to get ready, as an application that loads things would.
    code = <<~RUBY
      Drain = Struct.new(:server) do
        def shutdown(timeout:)
          File.write(#{log.path.inspect}, "drain \#{Process.pid}\\n", mode: "a")
          server.shutdown(timeout: timeout)
        end
      end
      workers = Evix::Workers.new("127.0.0.1", 0, count: 2, timeout: 2) do |loop, listener|
        sleep 0.3
        server = Evix::TCPServer.new(loop, listener) { |client| client.write("\#{Process.pid}\\n") }
        File.write(#{log.path.inspect}, "ready \#{Process.pid}\\n", mode: "a")
        Drain.new(server)
      end
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
    WorkersProcess.run(code) do |parent|
      old = parent.distinct_worker_pids(2).to_a
      outcomes = Hash.new(0)
      served = Set.new
      stop = false
      client = Thread.new do
        until stop
          begin
            served << parent.worker_pid(timeout: 5)
            outcomes[:served] += 1
          rescue StandardError => e
            outcomes[e.class] += 1
          end
        end
      end
      sleep 0.05 until outcomes.values.sum >= 20
      parent.signal(:HUP)
      fresh = parent.wait_for_children { |list| list.size == 2 && !list.intersect?(old) }
      deadline = LineSocket.now + 5
      sleep 0.05 until fresh.all? { |pid| served.include?(pid) } || LineSocket.now > deadline
      stop = true
      client.join
      expect(outcomes.keys).to eq([:served]) # no ECONNREFUSED, no reset, no connection without its reply
      expect(served).to include(*old, *fresh)
      steps = File.readlines(log.path, chomp: true).drop(2).map(&:split)
      expect(steps.map(&:first)).to eq(%w[ready drain ready drain])
      expect(steps.select { |step, _| step == "ready" }.map { |_, pid| Integer(pid) }).to match_array(fresh)
      expect(steps.select { |step, _| step == "drain" }.map { |_, pid| Integer(pid) }).to match_array(old)
    ensure
      stop = true
      client&.join
      log.close!
    end
  end

  # A drain answers every request that arrived before it began. A client
  # whose next request comes after its worker's last read sees end of file
  # before any reply (it reconnects and sends it again, as any keep-alive
  # client does), never a reset.
  it "loses no echo and resets no connection during a storm of SIGHUPs" do
    code = <<~RUBY
      workers = Evix::Workers.new("127.0.0.1", 0, count: 2, timeout: 2) do |loop, listener|
        Evix::TCPServer.new(loop, listener) do |client|
          while (line = client.gets)
            client.write(line)
          end
        end
      end
      puts workers.port
      $stdout.flush
      exit workers.run
    RUBY
    WorkersProcess.run(code) do |parent|
      outcomes = Hash.new(0)
      stop = false
      clients = Array.new(4) do |t|
        Thread.new do
          socket = nil
          sent = 0
          until stop
            socket ||= Socket.tcp("127.0.0.1", parent.port, connect_timeout: 5)
            request = "#{t}-#{sent}\n"
            begin
              socket.write(request)
              reply = socket.wait_readable(5) && socket.gets
            rescue SystemCallError => e
              outcomes[e.class.name] += 1
              reply = :failed
            end
            if reply == request
              outcomes[:echoed] += 1
              sent += 1
              next
            end
            if reply.nil?
              outcomes[:closed_before_reply] += 1 # arrived after the drain began: sent again
            elsif reply != :failed
              outcomes[:wrong] += 1
            end
            socket.close
            socket = nil
          end
        ensure
          socket&.close
        end
      end
      sleep 0.05 until outcomes[:echoed] >= 200
      12.times do
        parent.signal(:HUP)
        sleep 0.25
      end
      before = outcomes[:echoed]
      sleep 0.05 until outcomes[:echoed] >= before + 200
      stop = true
      clients.each(&:join)
      expect(outcomes.keys - %i[echoed closed_before_reply]).to eq([]), outcomes.inspect
      expect(outcomes[:echoed]).to be > 400
    ensure
      stop = true
      clients&.each(&:join)
    end
  end

  it "keeps the old workers serving when the new ones of a SIGHUP die before they are ready" do
    broken = "#{Dir.tmpdir}/evix-workers-broken-#{Process.pid}"
    WorkersProcess.run(pid_server(2, setup: "raise 'new code is broken' if File.exist?(#{broken.inspect})")) do |parent|
      old = parent.distinct_worker_pids(2).to_a
      File.write(broken, "")
      parent.signal(:HUP)
      failures = -> { parent.stderr.scan(/failed: RuntimeError: new code is broken/).size }
      deadline = LineSocket.now + 5
      sleep 0.05 until failures.call >= 2 || LineSocket.now > deadline
      expect(failures.call).to be >= 2
      expect(parent.distinct_worker_pids(2).to_a).to match_array(old)
      expect(parent.children).to include(*old)
      expect(parent.stderr).not_to match(/draining worker/)
    end
  ensure
    File.delete(broken) if broken && File.exist?(broken)
  end

  it "drains its workers when the parent dies, even by SIGKILL" do
    WorkersProcess.run(pid_server(2)) do |parent|
      workers = parent.distinct_worker_pids(2).to_a
      Process.kill(:KILL, parent.pid)
      deadline = LineSocket.now + 5
      sleep 0.02 until workers.none? { |pid| alive?(pid) } || LineSocket.now > deadline
      expect(workers.select { |pid| alive?(pid) }).to eq([])
    end
  end

  describe "bad input" do
    it "rejects a bad count, timeout, host or a missing block before it binds anything" do
      expect { described_class.new("127.0.0.1", 0, count: 0) {} }.to raise_error(ArgumentError, /count/)
      expect { described_class.new("127.0.0.1", 0, count: "2") {} }.to raise_error(TypeError, /count/)
      expect { described_class.new("127.0.0.1", 0, count: 2, timeout: -1) {} }.to raise_error(ArgumentError, /timeout/)
      expect { described_class.new(42, 0, count: 2) {} }.to raise_error(TypeError, /host/)
      expect { described_class.new("", 0, count: 2) {} }.to raise_error(ArgumentError, /host/)
      expect { described_class.new("127.0.0.1", 0, count: 2) }.to raise_error(ArgumentError, /block/)
    end

    it "binds in #new, so a port in use fails at the call" do
      taken = TCPServer.new("127.0.0.1", 0)
      expect { described_class.new("127.0.0.1", taken.addr[1], count: 1) {} }.to raise_error(Errno::EADDRINUSE)
    ensure
      taken&.close
    end

    it "runs once, and never inside Evix.run" do
      outcome = in_child do
        workers = described_class.new("127.0.0.1", 0, count: 1) {}
        Evix.run { capture { workers.run } }
      end
      expect(outcome).to match([:raised, "Evix::Error", /outside Evix.run/])
    end
  end

  describe "Evix::TCPServer on a listening socket" do
    it "serves a socket that is already listening (what each worker does)" do
      listener = Socket.new(:INET, :STREAM)
      listener.bind(Addrinfo.tcp("127.0.0.1", 0))
      listener.listen(16)
      outcome = in_child do
        evloop = Evix::Loop.new
        server = Evix::TCPServer.new(evloop, listener) { |client| client.write("hi\n") }
        reply = evloop.spawn do
          io = Evix::TCPClient.connect(evloop, "127.0.0.1", listener.local_address.ip_port)
          io.gets
        ensure
          io&.close
          server.close
        end
        [server.port == listener.local_address.ip_port, reply.wait]
      end
      expect(outcome).to eq([true, "hi\n"])
    ensure
      listener&.close
    end

    it "rejects a socket that is not listening, and a port given with a socket" do
      with_loop do |evloop|
        idle = Socket.new(:INET, :STREAM)
        expect { Evix::TCPServer.new(evloop, idle) {} }.to raise_error(ArgumentError, /not listening/)
        idle.bind(Addrinfo.tcp("127.0.0.1", 0))
        idle.listen(1)
        expect { Evix::TCPServer.new(evloop, idle, 80) {} }.to raise_error(ArgumentError, /port/)
        expect { Evix::TCPServer.new(evloop, "127.0.0.1") {} }.to raise_error(ArgumentError, /port/)
      ensure
        idle&.close
      end
    end
  end

  describe "exe/evix --workers" do
    it "runs `evix echo --workers 2`: two workers echo, SIGTERM drains them and exits 0" do
      ExampleProcess.run("echo", "--workers", "2") do |server|
        expect(server.banner).to eq("evix echo listening on 127.0.0.1:#{server.port}")
        clients = Array.new(4) { server.connect }
        clients.each_with_index { |client, i| client.puts("hello #{i}") }
        expect(clients.map(&:gets)).to eq(Array.new(4) { |i| "hello #{i}" })
        # Two echoes can come from one worker while the other still starts.
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
        until (workers = WorkersProcess.children_of(server.pid)).size == 2 ||
              Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          sleep 0.02
        end
        expect(workers.size).to eq(2)
        server.signal(:TERM)
        expect(clients.map { |client| client.gets(timeout: 5) }).to eq([nil] * 4)
        expect(server.wait.exitstatus).to eq(0)
        expect(workers.select { |pid| alive?(pid) }).to eq([])
      end
    end

    it "runs chat and kv with --workers (each worker keeps its own room or store)" do
      ExampleProcess.run("kv", "--workers", "2") do |server|
        client = server.connect
        client.puts("SET k v")
        expect(client.gets).to eq("OK")
        client.puts("GET k")
        expect(client.gets).to eq("v")
      end
      ExampleProcess.run("chat", "--workers", "2") do |server|
        expect(server.connect.gets).to match(/Welcome|evix/)
      end
    end

    it "forwards SIGQUIT to every worker, which prints its tasks, and goes on serving" do
      ExampleProcess.run("echo", "--workers", "2") do |server|
        client = server.connect
        client.puts("before")
        expect(client.gets).to eq("before")
        # The banner comes before the workers are ready; one that is not yet
        # has the parent's trap and ignores QUIT: ask again until both answered.
        printed = -> { server.stderr.scan(/live tasks? \(pid (\d+)\)/).flatten.uniq }
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
        until printed.call.size >= 2 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          server.signal(:QUIT)
          sleep 0.2
        end
        expect(printed.call.size).to eq(2)
        client.puts("after")
        expect(client.gets).to eq("after")
        expect(alive?(server.pid)).to be(true)
      end
    end

    it "rejects --workers 0" do
      out, err, status = Open3.capture3(RbConfig.ruby, "-I", ServerProcess::LIB, ExampleProcess::EXE,
                                        "echo", "--workers", "0")
      expect([out, status.exitstatus]).to eq(["", 2])
      expect(err).to include("--workers 0")
    end
  end
end
