# frozen_string_literal: true

require "spec_helper"
require "net/http"
require "open3"
require "tmpdir"

# `evix serve` (and `rackup -s evix`) as users start them: a config.ru in a
# directory of its own, a real process, real signals.
RSpec.describe "evix serve" do
  let(:config_ru) do
    <<~RUBY
      run lambda { |env|
        case env["PATH_INFO"]
        when "/pid" then [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
        when "/sleep"
          sleep Float(env["QUERY_STRING"])
          [200, { "content-type" => "text/plain" }, ["slept"]]
        else [200, { "content-type" => "text/plain" }, ["hello"]]
        end
      }
    RUBY
  end

  def with_serve(*args, pgroup: false)
    Dir.mktmpdir("evix-serve-") do |dir|
      File.write(File.join(dir, "config.ru"), config_ru)
      ServerProcess.run("evix serve", [ExampleProcess::EXE, "serve", "--bind", "tcp://127.0.0.1:0", *args],
                        ready: /\Aevix serve listening on 127\.0\.0\.1:(\d+)\z/, chdir: dir, pgroup: pgroup) do |server|
        yield server, dir
      end
    end
  end

  def get(server, path)
    Net::HTTP.get(URI("http://127.0.0.1:#{server.port}#{path}"))
  end

  def evix(*args, chdir: Dir.pwd)
    Open3.capture3(RbConfig.ruby, "-I", ServerProcess::LIB, ExampleProcess::EXE, *args, chdir: chdir)
  end

  before { skip "Rack is not installed" unless Gem::Specification.find_all_by_name("rack").any? }

  it "serves ./config.ru, and drains a request in flight on SIGTERM, then exits 0" do
    with_serve do |server|
      expect(get(server, "/")).to eq("hello")
      slow = Thread.new { get(server, "/sleep?0.5") }
      sleep 0.2
      server.signal(:TERM)
      expect(slow.value).to eq("slept")
      expect(server.wait.exitstatus).to eq(0)
    end
  end

  it "writes a Common Log Format line per request with --access-log PATH" do
    with_serve("--access-log", "access.log") do |server, dir|
      get(server, "/?q=1")
      server.signal(:INT)
      expect(server.wait.exitstatus).to eq(0)
      expect(File.read(File.join(dir, "access.log")))
        .to match(%r{\A127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] "GET /\?q=1 HTTP/1\.1" 200 5\n\z})
    end
  end

  it "prints its live tasks on SIGQUIT and goes on serving" do
    with_serve do |server|
      slow = Thread.new { get(server, "/sleep?0.6") }
      sleep 0.2
      server.signal(:QUIT)
      expect(slow.value).to eq("slept")
      expect(get(server, "/")).to eq("hello")
      expect(server.stderr).to include("Evix::Task")
    end
  end

  it "serves from preforked --workers, rolls them on SIGHUP without refusing a request, drains on SIGTERM" do
    with_serve("--workers", "2", pgroup: true) do |server|
      before = Array.new(8) { get(server, "/pid") }.uniq
      failures = 0
      stop = false
      client = Thread.new do
        until stop
          begin
            get(server, "/") == "hello" or failures += 1
          rescue SystemCallError, IOError
            failures += 1
          end
        end
      end
      server.signal(:HUP)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
      after = []
      until (after & before).empty? && after.size == 2
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          raise "workers not rolled within 15 s: #{before} -> #{after}"
        end

        sleep 0.2
        after = Array.new(8) { get(server, "/pid") }.uniq
      end
      stop = true
      client.join
      expect(failures).to eq(0)
      expect(before.size).to be_between(1, 2)
      server.signal(:TERM)
      expect(server.wait(timeout: 15).exitstatus).to eq(0)
    end
  end

  it "exits 2 on a bad --bind or a stray argument, 1 without a rackup file" do
    _, err, status = evix("serve", "--bind", "http://x:1")
    expect([status.exitstatus, err]).to match([2, %r{tcp://HOST:PORT or unix:PATH}])
    _, err, status = evix("serve", "a.ru", "b.ru")
    expect(status.exitstatus).to eq(2)
    Dir.mktmpdir do |dir|
      _, err, status = evix("serve", "--bind", "tcp://127.0.0.1:0", chdir: dir)
      expect([status.exitstatus, err]).to match([1, /no rackup file at config.ru/])
    end
  end

  it "answers --help with its options" do
    out, _, status = evix("serve", "--help")
    expect(status.exitstatus).to eq(0)
    expect(out).to include("--bind URL", "--workers N", "--tls-cert FILE", "--max-requests-in-flight N",
                           "--access-log [PATH]")
  end

  it "runs under rackup -s evix" do
    rackup = %w[rackup rack].filter_map do |gem|
      Gem.bin_path(gem, "rackup")
    rescue Gem::Exception
      nil
    end.first
    skip "no rackup executable" unless rackup
    Dir.mktmpdir("evix-rackup-") do |dir|
      File.write(File.join(dir, "config.ru"), config_ru)
      ServerProcess.run("rackup", [rackup, "-s", "evix", "-o", "127.0.0.1", "-p", "0", "config.ru"],
                        ready: /listening on 127\.0\.0\.1:(\d+)\z/, chdir: dir) do |server|
        expect(get(server, "/")).to eq("hello")
        server.signal(:TERM)
        expect(server.wait.exitstatus).to eq(0)
      end
    end
  end
end
