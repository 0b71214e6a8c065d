# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "support/example_process"

RSpec.describe "exe/evix" do
  def evix(*args)
    Open3.capture3(RbConfig.ruby, "-I", File.join(ExampleProcess::ROOT, "lib"), ExampleProcess::EXE, *args)
  end

  it "lists the commands with --help and exits 0" do
    out, _err, status = evix("--help")
    expect(status.exitstatus).to eq(0)
    expect(out).to include("Usage: evix COMMAND").and include("echo").and include("chat").and include("kv")
      .and include("bench")
  end

  it "shows a command's options with COMMAND --help" do
    out, _err, status = evix("chat", "--help")
    expect(status.exitstatus).to eq(0)
    expect(out).to include("--port N").and include("--host HOST").and include("--idle SECONDS")
      .and include("--welcome PATH")
  end

  it "exits 2 with a message for an unknown command, a missing command or a bad option" do
    [%w[frobnicate], [], %w[echo --port nope], %w[kv --port 70000], %w[chat --idle 0], %w[echo stray]].each do |args|
      _out, err, status = evix(*args)
      expect(status.exitstatus).to eq(2), "evix #{args.join(" ")}: #{status.inspect}"
      expect(err).to start_with("evix: ")
    end
  end

  it "exits 1 with a message when the port is taken" do
    ExampleProcess.run("kv") do |server|
      _out, err, status = evix("echo", "--port", server.port.to_s)
      expect(status.exitstatus).to eq(1)
      expect(err).to start_with("evix echo: cannot listen on 127.0.0.1:#{server.port}: Address already in use")
    end
  end

  it "listens on the --host it is given" do
    ExampleProcess.run("echo", "--host", "127.0.0.1") do |server|
      expect(server.banner).to eq("evix echo listening on 127.0.0.1:#{server.port}")
    end
  end
end
