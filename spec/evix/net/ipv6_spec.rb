# frozen_string_literal: true

require "spec_helper"
require "json"
require "open3"
require "tmpdir"

# IPv6 and dual-stack, on loopback only (127.0.0.1 and ::1).
RSpec.describe "IPv6 and dual-stack" do
  include_context "with a loop"
  before { ev } # created first: its own descriptors are not counted as leaks

  # An echo server (shut down by the after hook).
  def echo_server(host, port = 0)
    server = Evix::TCPServer.new(ev, host, port) do |client|
      while (data = client.read)
        client.write(data)
      end
    end
    track_server(server)
  end

  # Connects a plain blocking socket to host:port, writes +message+ and
  # returns [what came back, the peer's address], the loop running meanwhile.
  def plain_round_trip(host, port, message = "hi from #{host}")
    address = Addrinfo.tcp(host, port)
    socket = track_io(Socket.new(address.afamily, :STREAM)).first
    socket.connect(address)
    socket.write(message)
    got = String.new
    deadline = now + 3
    while got.bytesize < message.bytesize && now < deadline
      ev.run_once(0.01)
      chunk = socket.read_nonblock(1024, exception: false)
      got << chunk if chunk.is_a?(String)
    end
    [got, socket.remote_address.ip_address]
  end

  def evix_round_trip(host, port)
    in_task do
      io = Evix::TCPClient.connect(ev, host, port, timeout: 2)
      io.write("evix #{host}\n")
      [io.gets, io.io.remote_address.ip_address]
    ensure
      io&.close
    end
  end

  # Runs curl against url while the loop runs; [exit status, body, stderr].
  def curl(url)
    thread = helper_thread do
      Open3.capture3("curl", "--silent", "--show-error", "--globoff", "--max-time", "5", url)
    end
    deadline = now + 6
    ev.run_once(0.01) while thread.alive? && now < deadline
    out, err, status = thread.value
    [status.exitstatus, out, err]
  end

  def http_server(host)
    server = Evix::TCPServer.new(ev, host, 0) do |client|
      nil until client.gets == "\r\n"
      body = "you came from #{client.io.remote_address.ip_address}\n"
      client.write("HTTP/1.1 200 OK\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
    end
    (@servers ||= []) << server
    server
  end

  describe Evix::TCPServer do
    it "serves on [::1]: an Evix::TCPClient and a plain socket get their echo" do
      server = echo_server("::1")
      expect(server.local_address.ip_address).to eq("::1")
      expect(evix_round_trip("::1", server.port)).to eq(["evix ::1\n", "::1"])
      expect(plain_round_trip("::1", server.port)).to eq(["hi from ::1", "::1"])
    end

    [nil, "::"].each do |host|
      it "with host #{host.inspect} listens on every address: 127.0.0.1 and ::1 clients both reach it" do
        server = echo_server(host)
        expect(server.local_address.ip_address).to eq("::")
        expect(plain_round_trip("127.0.0.1", server.port)).to eq(["hi from 127.0.0.1", "127.0.0.1"])
        expect(plain_round_trip("::1", server.port)).to eq(["hi from ::1", "::1"])
        expect(evix_round_trip("127.0.0.1", server.port)).to eq(["evix 127.0.0.1\n", "127.0.0.1"])
        expect(evix_round_trip("::1", server.port)).to eq(["evix ::1\n", "::1"])
      end
    end

    it "with host \"0.0.0.0\" listens on IPv4 only" do
      server = echo_server("0.0.0.0")
      expect(plain_round_trip("127.0.0.1", server.port).first).to eq("hi from 127.0.0.1")
      expect { TCPSocket.new("::1", server.port) }.to raise_error(Errno::ECONNREFUSED)
    end

    it "answers curl on 127.0.0.1 and on [::1] when bound with host nil (a real client process)" do
      server = http_server(nil)
      expect(curl("http://127.0.0.1:#{server.port}/")).to eq([0, "you came from ::ffff:127.0.0.1\n", ""])
      expect(curl("http://[::1]:#{server.port}/")).to eq([0, "you came from ::1\n", ""])
    end

    it "raises at the call for a bad host or port, binding nothing" do
      before = fd_count
      expect { Evix::TCPServer.new(ev, 127, 0) {} }.to raise_error(TypeError, /host.*127/)
      expect { Evix::TCPServer.new(ev, "", 0) {} }.to raise_error(ArgumentError, /host.*empty/)
      expect { Evix::TCPServer.new(ev, "127.0.0.1", 70_000) {} }.to raise_error(ArgumentError, /port.*70000/)
      expect { Evix::TCPServer.new(ev, "127.0.0.1", -1) {} }.to raise_error(ArgumentError, /port.*-1/)
      expect { Evix::TCPServer.new(ev, "127.0.0.1", "80") {} }.to raise_error(TypeError, /port.*"80"/)
      expect(fd_count).to eq(before)
    end
  end

  describe Evix::TCPClient do
    it "raises at the call for a bad host, port, timeout or attempt_delay, opening nothing" do
      before = fd_count
      expect { in_task { Evix::TCPClient.connect(ev, nil, 80) } }.to raise_error(TypeError, /host/)
      expect { in_task { Evix::TCPClient.connect(ev, "", 80) } }.to raise_error(ArgumentError, /host/)
      expect { in_task { Evix::TCPClient.connect(ev, "::1", 65_536) } }.to raise_error(ArgumentError, /port/)
      expect { in_task { Evix::TCPClient.connect(ev, "::1", 80, timeout: Float::NAN) } }
        .to raise_error(ArgumentError, /timeout.*NaN/)
      expect { in_task { Evix::TCPClient.connect(ev, "::1", 80, attempt_delay: -0.1) } }
        .to raise_error(ArgumentError, /attempt_delay.*-0\.1/)
      expect(fd_count).to eq(before)
    end

    it "raises Errno::ECONNREFUSED naming [::1]'s host:port when nothing listens there" do
      server = echo_server("::1")
      port = server.port
      server.close
      expect { in_task { Evix::TCPClient.connect(ev, "::1", port, timeout: 2) } }
        .to raise_error(Errno::ECONNREFUSED, /::1:#{port}/)
    end
  end

  # "localhost" resolving to ::1 and 127.0.0.1, in a child process with its
  # own mount namespace where /etc/hosts says so (this machine's says
  # 127.0.0.1 only). The child runs every scenario and prints JSON.
  describe "Evix::TCPClient.connect(\"localhost\") with ::1 and 127.0.0.1 (RFC 8305)" do
    # A listener on host:port with a full backlog: Linux drops the SYN of a
    # further connect, which then hangs until its timeout.
    child_code = <<~RUBY
      $stdout.sync = true
      ev = Evix::Loop.new
      now = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
      fds = -> { Dir.children("/proc/self/fd").size }
      results = {}
      kept = []
      black_hole = lambda do |host, port|
        address = Addrinfo.tcp(host, port)
        listener = Socket.new(address.afamily, :STREAM)
        listener.bind(address)
        listener.listen(0)
        address = listener.local_address
        kept << listener
        4.times { kept << (s = Socket.new(address.afamily, :STREAM)); s.connect_nonblock(address, exception: false) }
        kept << (probe = Socket.new(address.afamily, :STREAM))
        probe.connect_nonblock(address, exception: false)
        (results["holes"] ||= []) << probe.wait_writable(0.2).nil?
        address.ip_port
      end
      echo = lambda do |host, port|
        Evix::TCPServer.new(ev, host, port) { |client| client.write(client.gets) }
      end
      attempt = lambda do |name, port, **options|
        3.times { ev.run_once(0.01) }
        before = fds.call
        t0 = now.call
        begin
          io = ev.spawn { Evix::TCPClient.connect(ev, "localhost", port, **options) }.wait
          took = now.call - t0
          io.write("hi\\n")
          line = ev.spawn { io.gets }.wait
          results[name] = { "remote" => io.io.remote_address.ip_address, "echo" => line, "took" => took }
          io.close
        rescue StandardError => e
          results[name] = { "error" => e.class.name, "message" => e.message, "took" => now.call - t0 }
        end
        3.times { ev.run_once(0.01) }
        results[name]["leaked"] = fds.call - before
      end

      results["resolved"] = ev.spawn { Evix::TCPClient.resolve(ev, "localhost", 80).map(&:ip_address) }.wait

      server = echo.call("::1", 0)
      attempt.call("v6 only", server.port, timeout: 5)
      server.close

      server = echo.call("127.0.0.1", 0)
      attempt.call("v4 only", server.port, timeout: 5, attempt_delay: 3)
      server.close

      port = black_hole.call("::1", 0)
      server = echo.call("127.0.0.1", port)
      attempt.call("v6 hangs", port, timeout: 5)
      server.close

      port = black_hole.call("::1", 0)
      black_hole.call("127.0.0.1", port)
      attempt.call("both hang", port, timeout: 0.5)

      server = echo.call("127.0.0.1", 0)
      port = server.port
      server.close
      attempt.call("both refuse", port, timeout: 5)

      # A name only DNS knows, and DNS (127.0.0.1:53 here, see run_with_hosts)
      # never answers: the timeout covers resolution too, and the loop goes on.
      begin
        kept << (dns = UDPSocket.new)
        dns.bind("127.0.0.1", 53)
        ticks = 0
        ticker = ev.spawn { loop { ev.sleep(0.01); ticks += 1 } }
        t0 = now.call
        begin
          ev.spawn { Evix::TCPClient.connect(ev, "evix-slow.test", 80, timeout: 0.5) }.wait
          results["slow resolver"] = { "error" => nil }
        rescue StandardError => e
          results["slow resolver"] = { "error" => e.class.name, "message" => e.message, "took" => now.call - t0 }
        end
        results["slow resolver"]["ticks"] = ticks
        results["slow resolver"]["queried"] = dns.wait_readable(0).nil? ? false : true
        ticker.cancel
      rescue Errno::EADDRINUSE, Errno::EACCES
        results["slow resolver"] = { "skipped" => "127.0.0.1:53 is taken" }
      end

      puts JSON.generate(results)
      exit!(0) # the pool thread still waits for DNS: no need to wait for it
    RUBY

    # Runs +code+ in a Ruby whose /etc/hosts is +hosts+ and whose DNS server
    # is 127.0.0.1 (3 s timeout, one try); [stdout, stderr, status].
    def run_with_hosts(hosts, code, timeout: 30)
      dir = Dir.mktmpdir("evix-hosts")
      File.write(File.join(dir, "hosts"), hosts)
      File.write(File.join(dir, "resolv.conf"), "nameserver 127.0.0.1\noptions timeout:3 attempts:1\n")
      lib = File.expand_path("../../../lib", __dir__)
      mount = 'mount --bind "$1/hosts" /etc/hosts && mount --bind "$1/resolv.conf" /etc/resolv.conf && ' \
              'shift && exec "$@"'
      command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh",
                 dir, RbConfig.ruby, "-I", lib, "-revix", "-rjson", "-e", code]
      Open3.popen3(*command, pgroup: true) do |input, out, err, thread|
        input.close
        readers = [Thread.new { out.read }, Thread.new { err.read }]
        if thread.join(timeout).nil?
          Process.kill(:KILL, -thread.pid)
          thread.join
        end
        [readers[0].value, readers[1].value, thread.value]
      end
    ensure
      FileUtils.rm_rf(dir)
    end

    def namespaces?
      system("unshare", "--mount", "--propagation", "private", "true", out: File::NULL, err: File::NULL)
    end

    it "reaches a server on ::1 only and one on 127.0.0.1 only, races a hung address, and keeps its timeout",
       timing: true do
      skip "needs unshare --mount (root) to give the child its own /etc/hosts" unless namespaces?

      out, err, status = run_with_hosts("::1 localhost\n127.0.0.1 localhost\n", child_code)
      expect(status).to be_success, "#{out}\n#{err}"
      results = JSON.parse(out.lines.last)
      skip "this kernel completes connects to a listener with a full backlog" unless results["holes"].all?

      expect(results["resolved"]).to eq(["::1", "127.0.0.1"])
      # Only ::1 listens: the first attempt wins.
      expect(results["v6 only"]).to include("remote" => "::1", "echo" => "hi\n", "leaked" => 0)
      # ::1 refuses: 127.0.0.1 starts at once, not after the 3 s attempt delay.
      expect(results["v4 only"]).to include("remote" => "127.0.0.1", "echo" => "hi\n", "leaked" => 0)
      expect(results["v4 only"]["took"]).to be < 1.5
      # ::1 never answers: 127.0.0.1 starts after ~250 ms and wins; the ::1 attempt is closed.
      expect(results["v6 hangs"]).to include("remote" => "127.0.0.1", "echo" => "hi\n", "leaked" => 0)
      expect(results["v6 hangs"]["took"]).to be_between(0.2, 2.5)
      # Neither answers: one timeout for the whole connect.
      expect(results["both hang"]).to include("error" => "Evix::TimeoutError", "leaked" => 0)
      expect(results["both hang"]["message"]).to match(/localhost:\d+ timed out after 0\.5s/)
      expect(results["both hang"]["took"]).to be_between(0.45, 2)
      # Both refuse: the last address's error, naming the host and that address.
      expect(results["both refuse"]).to include("error" => "Errno::ECONNREFUSED", "leaked" => 0)
      expect(results["both refuse"]["message"]).to match(/localhost:\d+ \(127\.0\.0\.1:\d+\)/)
      # Resolution that never ends: the same timeout holds, the loop runs meanwhile.
      next if results["slow resolver"]["skipped"]

      expect(results["slow resolver"]).to include("error" => "Evix::TimeoutError", "queried" => true)
      expect(results["slow resolver"]["message"]).to match(/evix-slow\.test:80 timed out after 0\.5s/)
      expect(results["slow resolver"]["took"]).to be_between(0.45, 2)
      expect(results["slow resolver"]["ticks"]).to be >= 10
    end
  end
end
