# frozen_string_literal: true

require "etc"
require "fileutils"
require "json"
require_relative "harness"
require_relative "report"
require_relative "network"
require_relative "paced"
require_relative "rack_apps"
require_relative "runtime"
require_relative "schedulers"
require_relative "targets"

module Bench
  # A benchmark server: +group+ is :ceiling, :evix or :peer (a Ruby peer);
  # +http_only+ for one that cannot echo.
  Server = Struct.new(:name, :label, :group, :command, :http_only, keyword_init: true) do
    def self.ruby(name, label, group, http_only: false)
      script = File.join(Harness::ROOT, "bench", "servers", "#{name}.rb")
      new(name: name, label: label, group: group, http_only: http_only,
          command: ->(port, mode) { Harness.ruby_command(script, port, mode) })
    end

    # The command line serving +mode+ ("echo" or "http"), given a port.
    def for_mode(mode)
      ->(port) { command.call(port, mode) }
    end
  end

  # What to run and how long; EVIX_BENCH_QUICK=1 shrinks every workload.
  Config = Struct.new(:quick, :echo_connections, :warmup, :duration, :http_seconds, :idle_connections,
                      :syscall_round_trips, :timers, :fibers, :micro_scale, :rounds, :rate, :paced_connections,
                      :maxrate_seconds, :maxrate_rounds, :scheduler_scale, keyword_init: true) do
    def self.from_env
      if ENV["EVIX_BENCH_QUICK"] == "1"
        new(quick: true, echo_connections: [1], warmup: 0.1, duration: 0.3, http_seconds: 1,
            idle_connections: 100, syscall_round_trips: 200, timers: 100, fibers: 100, micro_scale: 0.001,
            rounds: 1, rate: 2_000, paced_connections: [10], maxrate_seconds: 0.2, maxrate_rounds: 1,
            scheduler_scale: 0.01)
      else
        duration = Float(ENV.fetch("EVIX_BENCH_DURATION", "3"))
        new(quick: false, echo_connections: integers("EVIX_BENCH_CONNECTIONS", "1,10,100,1000"), warmup: 1.0,
            duration: duration, http_seconds: duration.ceil, idle_connections: 10_000, syscall_round_trips: 20_000,
            timers: 100_000, fibers: 10_000, micro_scale: 1.0, rounds: positive("EVIX_BENCH_ROUNDS", "5"),
            rate: positive("EVIX_BENCH_RATE", "20000"), paced_connections: integers("EVIX_BENCH_PACED", "100,1000"),
            maxrate_seconds: 1.5, maxrate_rounds: positive("EVIX_BENCH_MAXRATE_ROUNDS", "1"),
            scheduler_scale: Float(ENV.fetch("EVIX_BENCH_SCHEDULER_SCALE", "1")))
      end
    end

    def self.integers(name, default)
      ENV.fetch(name, default).split(",").map { |n| Integer(n) }
    end

    def self.positive(name, default)
      value = Integer(ENV.fetch(name, default))
      raise ArgumentError, "#{name} must be at least 1 (got #{value})" unless value.positive?

      value
    end
  end

  # Runs the workloads one after the other and writes the report.
  class Suite
    include Network
    include Paced
    include RackApps
    include Runtime
    include SchedulerWorkloads
    include Targets

    WORKLOADS = %w[echo rate maxrate http rack idle syscalls redis timers fibers scheduler micro].freeze
    # The gems whose versions the report names; a server needing one that is
    # missing is left out.
    PEER_GEMS = %w[async io-event io-stream nio4r eventmachine timers puma thin async-http protocol-rack rack
                   sinatra railties pg].freeze

    def initialize(config)
      @config = config
      @versions = peer_versions
      @servers = select_servers
      @results = {}
      @started = Time.now
    end

    def run
      # `rake bench` builds it once on the host, for every lane.
      Harness.build_loadgen! unless ENV["EVIX_BENCH_PREBUILT"] == "1"
      sections = WORKLOADS.select { |w| wanted?(w) }.map { |w| send("#{w}_section") }
      targets = target_rows
      report = [header, *sections, targets_section(targets)].compact.join("\n\n")
      out = output_path
      FileUtils.mkdir_p(File.dirname(out))
      File.write(out, "#{report}\n")
      save_targets(out, targets)
      puts report
      warn "bench: wrote #{out} in #{(Time.now - @started).round} s"
    end

    private

    def wanted?(workload)
      only = ENV.fetch("EVIX_BENCH_ONLY", "").split(",").map(&:strip)
      only.empty? || only.include?(workload)
    end

    # This lane's report; bench/report.rb puts the lanes together into bench/RESULTS.md.
    def output_path
      dir = @config.quick ? "bench-quick" : "bench"
      default = File.join(Harness::ROOT, "tmp", dir, "lane-#{RUBY_VERSION[/\A\d+\.\d+/]}.md")
      File.expand_path(ENV.fetch("EVIX_BENCH_OUT", default))
    end

    # Every full run keeps its target rows beside the lane report (runs/LANE-TIME.json):
    # a target is met only if it holds in each of three full runs, and
    # bench/report.rb tabulates the last three.
    def save_targets(out, rows)
      return if rows.empty? || @config.quick

      dir = File.join(File.dirname(out), "runs")
      FileUtils.mkdir_p(dir)
      name = "#{File.basename(out, ".md")}-#{@started.utc.strftime("%Y%m%d-%H%M%S")}.json"
      record = { "date" => @started.utc.strftime("%Y-%m-%d %H:%M UTC"), "evix" => evix_revision,
                 "targets" => targets_name, "rows" => rows }
      File.write(File.join(dir, name), JSON.pretty_generate(record))
    end

    def peer_versions
      script = "print JSON.generate(%w[#{PEER_GEMS.join(" ")}].to_h { |g| " \
               "[g, Gem::Specification.find_all_by_name(g).map(&:version).max&.to_s] })"
      out = IO.popen(Harness.child_env, [RbConfig.ruby, "-rjson", "-e", script], &:read)
      evix = File.read(File.join(Harness::ROOT, "lib", "evix", "version.rb"))[/VERSION = "(.+)"/, 1]
      JSON.parse(out).compact.merge("evix" => evix)
    end

    def select_servers
      all = [
        Server.new(name: "ceiling", label: "raw Rust epoll (ceiling)", group: :ceiling,
                   command: ->(port, mode) { [Harness.ceiling, port.to_s, mode] }),
        Server.ruby("evix_callback", "evix: Loop watchers, callbacks", :evix),
        Server.ruby("evix_fiber", "evix: TCPServer, fibers", :evix),
        Server.ruby("evix_scheduler", "evix: plain sockets on Evix::Scheduler", :evix),
        *async_servers,
        (Server.ruby("nio4r", "nio4r #{@versions["nio4r"]}: NIO::Selector", :peer) if @versions["nio4r"]),
        if @versions["eventmachine"]
          Server.ruby("eventmachine", "EventMachine #{@versions["eventmachine"]} (EM.epoll)", :peer)
        end,
        Server.ruby("io_select", "plain IO.select loop", :peer),
        Server.ruby("threads", "thread per connection", :peer),
        puma_server
      ].compact
      only = ENV.fetch("EVIX_BENCH_SERVERS", "").split(",").map(&:strip)
      only.empty? ? all : all.select { |s| only.include?(s.name) }
    end

    # Async::Wrapper is async 1's (gone in 2); IO::Stream is async 2's buffered path.
    def async_servers
      version = @versions["async"] or return []
      async = "async #{version}"
      io_event = " on io-event #{@versions["io-event"]}" if @versions["io-event"]
      [(Server.ruby("async_wrapper", "#{async}: Async::Wrapper", :peer) if version < "2"),
       Server.ruby("async_scheduler", "#{async}#{io_event}: plain sockets on its scheduler", :peer),
       if @versions["io-stream"]
         Server.ruby("async_stream", "#{async}: IO::Stream::Buffered (io-stream #{@versions["io-stream"]})", :peer)
       end].compact
    end

    # puma >= 6 (Puma::Server's options API); HTTP only, and labelled as the full HTTP server it is.
    def puma_server
      version = @versions["puma"]
      return unless version && Gem::Version.new(version) >= Gem::Version.new("6")

      Server.ruby("puma", "puma #{version}: Rack hello (parses HTTP fully; its default 0–5 threads)", :peer,
                  http_only: true)
    end

    # The servers that serve +mode+.
    def servers_for(mode)
      mode == "http" ? @servers : @servers.reject(&:http_only)
    end

    def server(name)
      @servers.find { |s| s.name == name }
    end

    # Runs the block and returns its Hash, or the failure as { "error" => message }.
    def attempt(label)
      started = Harness.now
      result = yield
      warn format("bench: %-40<label>s %5.1<secs>f s", label: label, secs: Harness.now - started)
      result
    rescue Harness::Failure, SystemCallError, JSON::ParserError => e
      warn "bench: #{label}: FAILED: #{e.message}"
      { "error" => e.message.lines.first.to_s.strip[0, 200] }
    end

    # Measures every name of +names+ (yielded) @config.rounds times, the names
    # taking turns, and keeps each one's median run by the figure under
    # +key+, whole (its other columns come from the same run): a burst of
    # load on the shared machine then spoils one run, not the report. A
    # failure counts only if every run failed.
    # The median run also carries every successful run under "rounds", for
    # the tables that show the spread.
    def median_of_rounds(names, key, rounds: @config.rounds)
      results = Array.new(rounds) { names.to_h { |name| [name, yield(name)] } }
      names.to_h do |name|
        runs = results.map { |round| round[name] }
        ok = runs.reject { |run| run["error"] }.sort_by { |run| run[key] }
        [name, ok.empty? ? runs.first : ok[ok.size / 2].merge("rounds" => ok)]
      end
    end

    # "min–max" of +key+ over the rounds median_of_rounds kept.
    def range(result, key, digits)
      values = result["rounds"]&.map { |run| run[key] }&.compact
      return "-" if values.nil? || values.size < 2

      format = digits.zero? ? ->(v) { Report.int(v) } : ->(v) { Report.float(v, digits) }
      "#{format.call(values.min)}–#{format.call(values.max)}"
    end

    # The sentence saying so, for the intros of the sections that do it.
    def rounds_note(who = "servers", rounds = @config.rounds)
      return "" if rounds == 1

      " Each figure is the median run of #{rounds}, the #{who} taking turns."
    end

    def failed_row(label, result, columns)
      ["#{label} (failed: #{result["error"].tr("|", "/")})", *Array.new(columns - 1, "-")]
    end

    def header
      cpu = File.foreach("/proc/cpuinfo").find { |l| l.start_with?("model name") }&.split(":", 2)&.last&.strip
      <<~MD.chomp
        # Ruby #{RUBY_VERSION[/\A\d+\.\d+/]} lane

        - Date: #{@started.utc.strftime("%Y-%m-%d %H:%M UTC")}#{if @config.quick
                                                                  " (EVIX_BENCH_QUICK=1: tiny configuration)"
                                                                end}
        - Machine: #{cpu || "unknown CPU"}, #{Etc.nprocessors} cores; Linux #{Etc.uname[:release]} (#{Etc.uname[:machine]})
        - Ruby: #{RUBY_DESCRIPTION}
        - evix: #{evix_revision}
        - Versions: #{@versions.map { |name, v| "#{name} #{v}" }.join(", ")}; #{tool_versions}
        - Servers pinned to CPU 0 (`taskset -c 0`), load generator and wrk to CPU 1; RLIMIT_NOFILE raised to #{Harness::NOFILE} for both.
      MD
    end

    # `rake bench` names it for the chroot lane, which has no git.
    def evix_revision
      return ENV["EVIX_BENCH_REVISION"] if ENV["EVIX_BENCH_REVISION"]

      head = IO.popen(%w[git rev-parse --short HEAD], chdir: Harness::ROOT, err: File::NULL, &:read).strip
      return "not a git checkout" if head.empty?

      dirty = !IO.popen(%w[git status --porcelain -- lib ext], chdir: Harness::ROOT, &:read).strip.empty?
      "commit #{head}#{" with uncommitted changes in lib/ or ext/" if dirty}"
    rescue SystemCallError
      "unknown revision"
    end

    def tool_versions
      wrk = IO.popen(%w[wrk -v], err: %i[child out], &:read)[/wrk \S+/]
      strace = IO.popen(%w[strace -V], err: %i[child out], &:read)[/version [\d.]+/]
      rustc = IO.popen(%w[rustc --version], err: File::NULL, &:read).to_s[/rustc [\d.]+/]
      [wrk, strace && "strace #{strace.split.last}", rustc].compact.join(", ")
    rescue SystemCallError
      "tool versions unknown"
    end
  end
end
