# frozen_string_literal: true

require "spec_helper"

# Evix::HTTP::Server embedded (in Evix.run, in a child with a deadline), and
# the hooks of the server kit it uses: Evix::Server's max_connections and
# #detach, Evix::IO#parse_buffered.
RSpec.describe Evix::HTTP::Server do
  let(:hello) { ->(_env) { [200, { "content-type" => "text/plain" }, ["hi"]] } }

  def get(port, path = "/")
    socket = TCPSocket.new("127.0.0.1", port)
    socket.write("GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    socket.read
  ensure
    socket&.close
  end

  it "serves in Evix.run, reports its address and connections, and drains" do
    app = hello
    outcome = evix_run_in_child do
      server = described_class.new(app, loop: Fiber.scheduler.loop, port: 0)
      response = get(server.port)
      port_ok = server.local_address.ip_port == server.port
      open = TCPSocket.new("127.0.0.1", server.port)
      sleep 0.05
      during = server.connections
      forced = server.shutdown(timeout: 1)
      open.close
      [response.end_with?("\r\n\r\nhi"), port_ok, during, forced, server.closed?, server.limits.max_headers]
    end
    expect(outcome).to eq([true, true, 1, 0, true, 100])
  end

  it "stops accepting on #close, and serves a UNIX socket path" do
    app = hello
    outcome = evix_run_in_child do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "h.sock")
        server = described_class.new(app, loop: Fiber.scheduler.loop, path: path)
        socket = UNIXSocket.new(path)
        socket.write("GET / HTTP/1.0\r\n\r\n")
        answer = socket.read
        server.close
        [answer.end_with?("hi"), server.port, File.exist?(path)]
      end
    end
    expect(outcome).to eq([true, nil, false])
  end

  it "refuses bad arguments at the call, binding nothing" do
    loop = Evix::Loop.new
    expect { described_class.new(:app, loop: loop) }.to raise_error(TypeError, /app must respond to #call/)
    expect { described_class.new(hello, loop: loop, port: 0, max_body: -1) }
      .to raise_error(ArgumentError, /max_body must be positive/)
    expect { described_class.new(hello, loop: loop, port: 0, bogus: 1) }.to raise_error(ArgumentError, /bogus/)
    expect { described_class.new(hello, loop: loop, path: "/tmp/x.sock", ssl_context: Object.new) }
      .to raise_error(ArgumentError, /ssl_context is for TCP/)
  ensure
    loop.close
  end

  it "logs an app's error with its backtrace to error_log, and tells clients who went away apart" do
    log = StringIO.new
    loop = Evix::Loop.new
    server = described_class.new(hello, loop: loop, port: 0, error_log: log)
    error = RuntimeError.new("boom")
    error.set_backtrace(["app.rb:1"])
    server.report(error, { "REQUEST_METHOD" => "GET", "REQUEST_URI" => "/x" })
    expect(log.string).to eq("evix serve: RuntimeError: boom (GET /x)\n\tapp.rb:1\n")
    expect(server.client_gone?(Errno::EPIPE.new)).to be(true)
    expect(server.client_gone?(error)).to be(false)
    server.close
  ensure
    loop.close
  end
end

RSpec.describe Evix::Server do
  it "stops accepting at max_connections and accepts again when one ends" do
    outcome = evix_run_in_child do
      loop = Fiber.scheduler.loop
      release = Evix::Queue.new
      server = Evix::TCPServer.new(loop, "127.0.0.1", 0, max_connections: 1) do |client|
        client.write("hi\n")
        release.pop
      end
      first = TCPSocket.new("127.0.0.1", server.port)
      greeted = first.gets
      second = TCPSocket.new("127.0.0.1", server.port) # waits in the backlog
      waiting = second.wait_readable(0.3).nil?
      release.push(:go)
      [greeted, waiting, second.gets, server.connections <= 1]
    ensure
      release.push(:go)
      server&.close
    end
    expect(outcome).to eq(["hi\n", true, "hi\n", true])
  end

  it "refuses a max_connections that is not a positive Integer" do
    loop = Evix::Loop.new
    expect { Evix::TCPServer.new(loop, "127.0.0.1", 0, max_connections: 0) { nil } }
      .to raise_error(ArgumentError, /max_connections must be a positive Integer or nil \(got 0\)/)
  ensure
    loop.close
  end

  it "leaves a detached connection open when its handler ends" do
    outcome = evix_run_in_child do
      loop = Fiber.scheduler.loop
      kept = nil
      server = Evix::TCPServer.new(loop, "127.0.0.1", 0) do |client|
        server.detach(client)
        kept = client
      end
      socket = TCPSocket.new("127.0.0.1", server.port)
      sleep 0.05 until kept
      sleep 0.05
      open = !kept.closed?
      kept.write("still here\n")
      line = socket.gets
      kept.close
      [open, line, server.connections]
    ensure
      server&.close
    end
    expect(outcome).to eq([true, "still here\n", 0])
  end
end

RSpec.describe Evix::IO do
  it "parse_buffered hands the buffer to a parser until it takes something" do
    outcome = evix_run_in_child do
      reader, writer = UNIXSocket.pair
      io = Evix::IO.new(Fiber.scheduler.loop, reader)
      Fiber.schedule do
        writer.write("ab")
        sleep 0.05
        writer.write("c|rest")
      end
      calls = []
      used = io.parse_buffered(2) do |buffer, offset|
        calls << buffer.byteslice(offset..)
        (at = buffer.index("|", offset)) ? at + 1 - offset : nil
      end
      refused = io.parse_buffered(nil) { -400 }
      timed_out = begin
        io.parse_buffered(0.1) { nil }
      rescue Evix::TimeoutError
        :timeout
      end
      writer.close
      rest = io.read
      [calls, used, refused, timed_out, rest, io.parse_buffered(1) { 0 }]
    end
    expect(outcome).to eq([%w[ab abc|rest], 4, -400, :timeout, "rest", nil])
  end
end
