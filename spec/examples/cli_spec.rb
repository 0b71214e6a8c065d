# frozen_string_literal: true

require "spec_helper"
require "open3"
require "tmpdir"

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

  it "offers bench only where the benchmarks are: outside a source checkout --help leaves it out " \
     "and evix bench says it needs one" do
    Dir.mktmpdir("evix-gem-like-") do |dir| # what an installed gem holds: exe/, lib/, examples/, no bench/
      %w[exe lib examples].each { |part| FileUtils.cp_r(File.join(ExampleProcess::ROOT, part), dir) }
      exe = File.join(dir, "exe", "evix")
      out, _err, status = Open3.capture3(RbConfig.ruby, exe, "--help")
      expect(status.exitstatus).to eq(0)
      expect(out).to include("echo").and include("kv")
      expect(out).not_to include("bench")
      _out, err, status = Open3.capture3(RbConfig.ruby, exe, "bench")
      expect(status.exitstatus).to eq(1)
      expect(err).to include("the benchmarks need a source checkout of evix")
    end
  end

  it "shows a command's options with COMMAND --help" do
    out, _err, status = evix("chat", "--help")
    expect(status.exitstatus).to eq(0)
    expect(out).to include("--port N").and include("--host HOST").and include("--idle SECONDS")
      .and include("--welcome PATH").and include("--max-outbox BYTES")
  end

  # bench --help used to run the whole benchmark suite. A command that did
  # run would print "listening" (servers) or take minutes (bench): the deadline
  # of this spec and the exact output rule both out.
  %w[echo chat kv bench].product(%w[--help -h]).each do |command, flag|
    it "answers evix #{command} #{flag} with its usage and exits 0 without running" do
      out, err, status = evix(command, flag)
      expect(status.exitstatus).to eq(0)
      expect(out).to start_with("Usage: evix #{command} [options]").and include("-h, --help")
      expect(out).not_to include("listening")
      expect(err).to be_empty
    end
  end

  it "lists bench's options, each the environment variable bench/run.rb reads" do
    out, = evix("bench", "--help")
    expect(out).to include("--quick").and include("--only LIST").and include("--servers LIST").and include("--out PATH")
  end

  it "exits 2 with a message for an unknown command or a missing one, and the usage on stderr" do
    [%w[frobnicate], []].each do |args|
      out, err, status = evix(*args)
      expect(status.exitstatus).to eq(2), "evix #{args.join(" ")}: #{status.inspect}"
      expect(err).to start_with("evix: ").and include("Usage: evix COMMAND")
      expect(out).to be_empty
    end
  end

  [%w[echo --port nope], %w[kv --port 70000], %w[chat --idle 0], %w[chat --max-outbox 0],
   %w[chat --max-outbox lots], %w[echo stray], %w[kv --frobnicate], %w[bench --frobnicate], %w[bench extra]]
    .each do |command, *args|
      it "exits 2 for evix #{command} #{args.join(" ")}, with the command's usage on stderr and nothing run" do
        out, err, status = evix(command, *args)
        expect(status.exitstatus).to eq(2), status.inspect
        expect(err).to start_with("evix: ").and include("Usage: evix #{command} [options]")
        expect(out).to be_empty
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
