# frozen_string_literal: true

require "pathname"
require "spec_helper"
require "tmpdir"
require "open3"

RSpec.describe Evix::UNIXServer do
  include_context "with a loop"
  before { ev } # created first: its own descriptors are not counted as leaks
  let(:dir) { Dir.mktmpdir("evix-unix") }
  let(:path) { File.join(dir, "server.sock") }

  after { FileUtils.rm_rf(dir) }

  # A server that the after hook shuts down.
  def server_at(where = path, **options, &)
    track_server(described_class.new(ev, where, **options, &))
  end

  def echo_server(where = path, **options)
    server_at(where, **options) do |client|
      while (data = client.read)
        client.write(data)
      end
    end
  end

  # A plain blocking UNIX client (closed by the after hook).
  def plain_client(where = path)
    track_io(UNIXSocket.new(where)).first
  end

  # A socket file at +where+ that nobody listens on, as a server that died leaves it.
  def stale_socket_file(where = path)
    socket = Socket.new(:UNIX, :STREAM)
    socket.bind(Addrinfo.unix(where))
    socket.close
    expect(File.socket?(where)).to be(true)
  end

  describe "construction" do
    it "binds the path, reports it, and serves connections" do
      server = echo_server
      expect(server.path).to eq(path)
      expect(server.local_address.unix_path).to eq(path)
      expect(File.socket?(path)).to be(true)
      client = plain_client
      expect(round_trip(ev, client, "hello\n")).to eq("hello\n")
      run_until(ev) { server.connections == 1 }
      client.close
      run_until(ev) { server.connections.zero? }
    end

    it "takes a Pathname" do
      server = echo_server(Pathname(path))
      expect(server.path).to eq(path)
      expect(round_trip(ev, plain_client, "x")).to eq("x")
    end

    it "raises ArgumentError at the call for a path longer than sun_path, creating nothing" do
      long = File.join(dir, "s" * (109 - dir.bytesize - 1))
      expect(long.bytesize).to eq(109)
      before = fd_count
      expect { described_class.new(ev, long) {} }.to raise_error(ArgumentError, /too long.*108/)
      expect(fd_count).to eq(before)
      expect(Dir.children(dir)).to eq([])
    end

    it "binds a path of exactly 108 bytes" do
      longest = File.join(dir, "s" * (108 - dir.bytesize - 1))
      server = echo_server(longest)
      expect(round_trip(ev, plain_client(longest), "108")).to eq("108")
      server.close
      expect(File.exist?(longest)).to be(false)
    end

    it "raises for an empty path, a NUL byte, a non-path, a bad idle_timeout or no block" do
      expect { described_class.new(ev, "") {} }.to raise_error(ArgumentError, /empty/)
      expect { described_class.new(ev, "#{dir}/a\0b") {} }.to raise_error(ArgumentError, /NUL/)
      expect { described_class.new(ev, 42) {} }.to raise_error(TypeError, /path.*42/)
      expect { described_class.new(ev, path, idle_timeout: -1) {} }.to raise_error(ArgumentError, /idle_timeout.*-1/)
      expect { described_class.new(ev, path) }.to raise_error(ArgumentError, /block/)
      expect(File.exist?(path)).to be(false)
    end
  end

  describe "a socket file already at the path" do
    it "removes a stale one (nothing listens) and binds" do
      stale_socket_file
      server = echo_server
      expect(round_trip(ev, plain_client, "after stale")).to eq("after stale")
      expect(server.closed?).to be(false)
    end

    it "raises Errno::EADDRINUSE for a live listener, which keeps its file and its clients" do
      live = track_io(UNIXServer.new(path)).first
      before = fd_count
      expect { described_class.new(ev, path) {} }.to raise_error(Errno::EADDRINUSE, /#{Regexp.escape(path)}.*listening/)
      expect(fd_count).to eq(before)
      expect(File.socket?(path)).to be(true)
      probe = track_io(live.accept).first # the check's connection, closed at once
      expect(probe.read).to eq("")
      client = plain_client
      accepted = track_io(live.accept).first
      client.write("still mine")
      expect(accepted.readpartial(100)).to eq("still mine")
    end

    it "raises Errno::EADDRINUSE for a live listener whose backlog is full" do
      live = Socket.new(:UNIX, :STREAM)
      track_io(live)
      live.bind(Addrinfo.unix(path))
      live.listen(0)
      fillers = Array.new(3) { track_io(Socket.new(:UNIX, :STREAM)).first }
      fillers.each do |filler|
        filler.connect_nonblock(Addrinfo.unix(path), exception: false)
      rescue Errno::EAGAIN
        nil
      end
      expect { described_class.new(ev, path) {} }.to raise_error(Errno::EADDRINUSE)
      expect(File.socket?(path)).to be(true)
    end

    it "never removes a file that is not a socket" do
      File.write(path, "precious")
      expect { described_class.new(ev, path) {} }.to raise_error(Errno::EADDRINUSE, /not a socket/)
      expect(File.read(path)).to eq("precious")
    end
  end

  describe "#close and #shutdown" do
    it "close stops accepting, removes the socket file, lets open connections go on, and is idempotent" do
      server = echo_server
      client = plain_client
      expect(round_trip(ev, client, "before")).to eq("before")
      expect(server.close).to be_nil
      expect(server.close).to be_nil
      expect(server.closed?).to be(true)
      expect(File.exist?(path)).to be(false)
      expect { UNIXSocket.new(path) }.to raise_error(Errno::ENOENT)
      expect(round_trip(ev, client, "after")).to eq("after")
    end

    it "leaves alone a socket file that another server put at the path after this one's was removed" do
      server = echo_server
      File.unlink(path)
      other = track_io(UNIXServer.new(path)).first
      server.close
      expect(File.socket?(path)).to be(true)
      expect(other.local_address.unix_path).to eq(path)
    end

    it "does not remove the file when a forked child tries to close its copy of the server" do
      server = echo_server
      outcome = in_child { [capture { server.close }, File.socket?(path)] }
      expect(outcome).to match([[:raised, "Evix::Error", /fork/], true])
      expect(File.socket?(path)).to be(true)
      expect(round_trip(ev, plain_client, "parent serves")).to eq("parent serves")
    end

    it "drains: a reading client gets every byte, a stuck handler is forced at the deadline, the file goes",
       timing: true do
      payload = Random.new(3).bytes(600_000)
      started = []
      server = server_at do |client|
        line = client.gets
        started << line
        ev.sleep(10) if line.start_with?("stuck")
        client.write(payload)
        nil while client.read
      end
      reading = plain_client
      stuck = plain_client
      reading.write("read\n")
      stuck.write("stuck\n")
      run_until(ev) { started.size == 2 }
      reader = helper_thread do
        received = String.new(encoding: Encoding::BINARY)
        loop { received << reading.readpartial(65_536) }
      rescue EOFError
        received
      end
      forced = nil
      took = elapsed { forced = server.shutdown(timeout: 0.5) }
      expect(forced).to eq(1)
      expect(took).to be_between(0.45, 2)
      expect(reader.value == payload).to be(true)
      expect(stuck.read).to eq("")
      expect(File.exist?(path)).to be(false)
      expect(server.connections).to eq(0)
    end
  end

  describe "idle_timeout and on_error" do
    it "closes a connection with no input for idle_timeout seconds", timing: true do
      server = echo_server(idle_timeout: 0.2)
      quiet = plain_client
      run_until(ev) { server.connections == 1 }
      took = elapsed { run_until(ev) { drain(quiet, +"") == :eof } }
      expect(took).to be_between(0.1, 1.5)
      run_until(ev) { server.connections.zero? }
    end

    it "passes a handler's exception to on_error and closes that connection only" do
      errors = []
      server = server_at do |client|
        while (line = client.gets)
          raise EvixSpecError, "bad line" if line.start_with?("bad")

          client.write(line)
        end
      end
      server.on_error { |error, client| errors << [error.message, client.class] }
      good = plain_client
      bad = plain_client
      bad.write("bad\n")
      run_until(ev) { errors.any? }
      expect(errors).to eq([["bad line", Evix::IO]])
      expect(round_trip(ev, good, "fine\n")).to eq("fine\n")
    end
  end

  describe "with real clients" do
    it "answers curl --unix-socket (a real HTTP client process)" do
      server_at do |client|
        nil until client.gets == "\r\n"
        client.write("HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nhello unix\r\n")
      end
      curl = helper_thread do
        Open3.capture3("curl", "--silent", "--show-error", "--max-time", "5", "--unix-socket", path,
                       "http://evix/")
      end
      run_until(ev) { !curl.alive? }
      out, err, status = curl.value
      expect([status.exitstatus, err]).to eq([0, ""])
      expect(out).to eq("hello unix\r\n")
    end

    it "serves 50 Evix::UNIXClient connections at once, every byte intact" do
      server = echo_server
      tasks = Array.new(50) do |i|
        ev.spawn do
          io = Evix::UNIXClient.connect(ev, path, timeout: 5)
          message = "client #{i} #{"y" * (i * 97)}\n"
          io.write(message)
          echoed = io.read_exactly(message.bytesize, timeout: 5)
          io.close
          echoed == message
        end
      end
      expect(tasks.map(&:wait)).to all(be(true))
      run_until(ev) { server.connections.zero? }
    end
  end
end
