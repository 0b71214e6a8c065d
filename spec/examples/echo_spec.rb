# frozen_string_literal: true

require "spec_helper"
require_relative "../../examples/echo"

RSpec.describe "evix echo (examples/echo.rb)" do
  it "prints where it listens and echoes lines back" do
    ExampleProcess.run("echo") do |server|
      expect(server.banner).to eq("evix echo listening on 127.0.0.1:#{server.port}")
      client = server.connect
      client.puts("hello")
      client.puts("world")
      expect([client.gets, client.gets]).to eq(%w[hello world])
    end
  end

  it "echoes 1 MiB of binary data byte for byte while the client writes and reads at once" do
    ExampleProcess.run("echo") do |server|
      client = server.connect
      data = Random.new(1).bytes(1024 * 1024)
      writer = Thread.new { client.io.write(data) }
      received = String.new(encoding: Encoding::BINARY)
      while received.bytesize < data.bytesize
        raise "echo stalled at #{received.bytesize} bytes" unless client.io.wait_readable(5)

        received << client.io.readpartial(64 * 1024)
      end
      writer.join
      expect(received).to eq(data)
    ensure
      writer&.kill
    end
  end

  it "serves clients independently: one silent connection does not hold up another" do
    ExampleProcess.run("echo") do |server|
      silent = server.connect
      talker = server.connect
      talker.puts("ping")
      expect(talker.gets).to eq("ping")
      expect(silent.quiet?).to be(true)
    end
  end

  %i[TERM INT].each do |signal|
    it "drains on SIG#{signal}: connected clients see end of file and the process exits 0" do
      ExampleProcess.run("echo") do |server|
        client = server.connect
        client.puts("before")
        expect(client.gets).to eq("before")
        server.signal(signal)
        expect(client.gets(timeout: 5)).to be_nil
        expect(server.wait.exitstatus).to eq(0)
      end
    end
  end

  it "runs in-process too: Echo#start on a loop of one's own" do
    evloop = new_loop
    server = Evix::Examples::Echo.new(port: 0).start(evloop)
    reply = nil
    client = helper_thread do
      socket = TCPSocket.new("127.0.0.1", server.port)
      socket.write("in-process\n")
      reply = socket.gets
      socket.close
    end
    evloop.run_once(0.05) while client.alive?
    server.shutdown(timeout: 1)
    expect(reply).to eq("in-process\n")
  end
end
