# frozen_string_literal: true

require "open3"
require "rbconfig"
require "tmpdir"

# `rake bench` end to end in its tiny configuration (EVIX_BENCH_QUICK=1): every
# server, workload and table, with no timing assertions: only that it runs,
# that no row failed and that the report is written where it was told.
RSpec.describe "bench/run.rb (EVIX_BENCH_QUICK=1)" do
  root = File.expand_path("../..", __dir__)
  servers = %w[ceiling evix_callback evix_fiber evix_scheduler async_wrapper async_scheduler nio4r eventmachine
               io_select threads]
  # The servers with a row in the fixed-rate and highest-rate tables too.
  paced = %w[ceiling evix_callback evix_fiber evix_scheduler async_wrapper async_scheduler nio4r]

  before(:all) do
    @dir = Dir.mktmpdir("evix-bench-spec-")
    @out_path = File.join(@dir, "RESULTS.md")
    @committed = File.join(root, "bench", "RESULTS.md")
    @committed_mtime = File.exist?(@committed) && File.mtime(@committed)
    env = { "EVIX_BENCH_QUICK" => "1", "EVIX_BENCH_OUT" => @out_path }
    # Outside Bundler, as `rake bench` runs it: the peers are Debian's gems, not in the bundle.
    env.merge!(ENV.keys.grep(/\ABUNDLE|\ARUBYOPT\z|\ARUBYLIB\z/).to_h { |key| [key, nil] })
    @stdout, @stderr, @status = Open3.capture3(env, RbConfig.ruby, File.join(root, "bench", "run.rb"), chdir: root)
    @report = File.exist?(@out_path) ? File.read(@out_path) : ""
  end

  after(:all) { FileUtils.rm_rf(@dir) }

  it "exits 0 and writes the report to EVIX_BENCH_OUT" do
    expect(@status).to be_success, "exit #{@status.exitstatus}\n#{@stderr.lines.last(20).join}"
    expect(@report).not_to be_empty
    expect(@stdout).to include(@report.lines.first.strip)
  end

  it "leaves bench/RESULTS.md alone" do
    expect(File.exist?(@committed) && File.mtime(@committed)).to eq(@committed_mtime)
  end

  it "prints every table" do
    ["## Echo ping-pong", "### 1 connection", "## HTTP/1.1 keep-alive hello", "idle connections",
     "## System calls per echo round trip", "one-shot timers", "concurrent fibers", "## Micro-benchmarks",
     "## Fixed rate: server CPU per round trip", "## The highest fixed rate each server keeps up with",
     "## Fiber::Scheduler workloads", "## redis-benchmark", "## Targets (against async 1.30)"].each do |title|
      expect(@report).to include(title)
    end
  end

  it "has a row for every server in the echo, HTTP, idle, fixed-rate and highest-rate tables, and none failed" do
    labels = {
      "ceiling" => "raw Rust epoll", "evix_callback" => "evix: Loop watchers", "evix_fiber" => "evix: TCPServer",
      "evix_scheduler" => "evix: plain sockets on Evix::Scheduler", "async_wrapper" => "Async::Wrapper",
      "async_scheduler" => "plain sockets on its scheduler", "nio4r" => "NIO::Selector",
      "eventmachine" => "EM.epoll", "io_select" => "IO.select loop", "threads" => "thread per connection"
    }
    expect(labels.keys).to eq(servers)
    labels.each do |name, label|
      rows = @report.scan(/^\| [^|\n]*#{Regexp.escape(label)}/).size
      expect(rows).to eq(paced.include?(name) ? 5 : 3), label
    end
    expect(@report).not_to include("failed:")
  end

  it "has the Rack apps section: a table per app and load, the Rust HTTP ceiling in the hello one" do
    expect(@report).to include("## Rack apps on HTTP servers", "### Rack hello, `wrk -c100`",
                               "### `sleep 0.01` app, `wrk -c1,000`", "### PostgreSQL", "idle keep-alive connections")
    hello = @report[/^### Rack hello, `wrk -c100`.*?(?=^###)/m]
    expect(hello).to match(/^\| raw Rust HTTP ceiling \(epoll, no Rack\) \| [\d,]+ \|/)
  end

  it "counts system calls per round trip for the evix servers" do
    header = @report[/^\| System call \|.*$/]
    expect(header).to include("evix: TCPServer, fibers", "raw Rust epoll (ceiling)")
    expect(@report).to match(/^\| \*\*total\*\* \|( \*\*[\d.]+\*\* \|)+$/)
  end

  it "has a row for each Fiber::Scheduler workload, each with all three timings" do
    %w[pipes socketpairs mutex_file queue sleep].each do |workload|
      expect(@report).to match(/^\| #{workload}: [^|]+(\| [\d.]+ ){3}\|/)
    end
  end

  it "has the redis-benchmark rows for SET and GET, with a ratio" do
    %w[SET GET].each { |test| expect(@report).to match(/^\| #{test} \| \d+ \| \d+ \| [\d.]+ \|$/) }
  end

  it "has the timer, fiber and micro-benchmark rows" do
    rows = ["evix: Loop#add_timer", "Timers::Group", "Evix.run + Fiber.schedule", "Loop#spawn + Loop#sleep",
            "async 1.30: Async", "cross-thread posts"]
    rows.each { |row| expect(@report).to match(/^\| [^\n]*#{Regexp.escape(row)}/) }
  end
end
