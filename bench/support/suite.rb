# frozen_string_literal: true

require "etc"
require "fileutils"
require "json"
require_relative "harness"
require_relative "report"
require_relative "network"
require_relative "runtime"
require_relative "targets"

module Bench
  # A benchmark server: +group+ is :ceiling, :evix or :peer (a Ruby peer).
  Server = Struct.new(:name, :label, :group, :command, keyword_init: true) do
    def self.ruby(name, label, group)
      script = File.join(Harness::ROOT, "bench", "servers", "#{name}.rb")
      new(name: name, label: label, group: group,
          command: ->(port, mode) { Harness.ruby_command(script, port, mode) })
    end

    # The command line serving +mode+ ("echo" or "http"), given a port.
    def for_mode(mode)
      ->(port) { command.call(port, mode) }
    end
  end

  # What to run and how long; EVIX_BENCH_QUICK=1 shrinks every workload.
  Config = Struct.new(:quick, :echo_connections, :warmup, :duration, :http_seconds, :idle_connections,
                      :syscall_round_trips, :timers, :fibers, :micro_scale, :rounds, keyword_init: true) do
    def self.from_env
      if ENV["EVIX_BENCH_QUICK"] == "1"
        new(quick: true, echo_connections: [1], warmup: 0.1, duration: 0.3, http_seconds: 1,
            idle_connections: 100, syscall_round_trips: 200, timers: 100, fibers: 100, micro_scale: 0.001,
            rounds: 1)
      else
        duration = Float(ENV.fetch("EVIX_BENCH_DURATION", "3"))
        connections = ENV.fetch("EVIX_BENCH_CONNECTIONS", "1,10,100,1000").split(",").map { |n| Integer(n) }
        rounds = Integer(ENV.fetch("EVIX_BENCH_ROUNDS", "3"))
        raise ArgumentError, "EVIX_BENCH_ROUNDS must be at least 1 (got #{rounds})" unless rounds.positive?

        new(quick: false, echo_connections: connections, warmup: 1.0, duration: duration,
            http_seconds: duration.ceil, idle_connections: 10_000, syscall_round_trips: 20_000,
            timers: 100_000, fibers: 10_000, micro_scale: 1.0, rounds: rounds)
      end
    end
  end

  # Runs the workloads one after the other and writes the report.
  class Suite
    include Network
    include Runtime
    include Targets

    WORKLOADS = %w[echo http idle syscalls timers fibers micro].freeze

    def initialize(config)
      @config = config
      @versions = peer_versions
      @servers = select_servers
      @results = {}
      @started = Time.now
    end

    def run
      Harness.build_loadgen!
      sections = WORKLOADS.select { |w| wanted?(w) }.map { |w| send("#{w}_section") }
      report = [header, *sections, targets_section, notes, profile].compact.join("\n\n")
      out = output_path
      FileUtils.mkdir_p(File.dirname(out))
      File.write(out, "#{report}\n")
      puts report
      warn "bench: wrote #{out} in #{(Time.now - @started).round} s"
    end

    private

    def wanted?(workload)
      only = ENV.fetch("EVIX_BENCH_ONLY", "").split(",").map(&:strip)
      only.empty? || only.include?(workload)
    end

    def output_path
      default = if @config.quick
                  File.join(Harness::ROOT, "tmp", "bench-quick", "RESULTS.md")
                else
                  File.join(Harness::ROOT, "bench", "RESULTS.md")
                end
      File.expand_path(ENV.fetch("EVIX_BENCH_OUT", default))
    end

    def peer_versions
      script = "print JSON.generate(%w[async nio4r eventmachine timers].to_h { |g| " \
               "[g, (Gem::Specification.find_by_name(g).version.to_s rescue nil)] })"
      out = IO.popen(Harness.child_env, [RbConfig.ruby, "-rjson", "-e", script], &:read)
      evix = File.read(File.join(Harness::ROOT, "lib", "evix", "version.rb"))[/VERSION = "(.+)"/, 1]
      JSON.parse(out).compact.merge("evix" => evix)
    end

    def select_servers
      async = "async #{@versions["async"]}"
      all = [
        Server.new(name: "ceiling", label: "raw Rust epoll (ceiling)", group: :ceiling,
                   command: ->(port, mode) { [Harness.ceiling, port.to_s, mode] }),
        Server.ruby("evix_callback", "evix: Loop watchers, callbacks", :evix),
        Server.ruby("evix_fiber", "evix: TCPServer, fibers", :evix),
        Server.ruby("evix_scheduler", "evix: plain sockets on Evix::Scheduler", :evix),
        Server.ruby("async_wrapper", "#{async}: Async::Wrapper", :peer),
        Server.ruby("async_scheduler", "#{async}: plain sockets on its scheduler", :peer),
        Server.ruby("nio4r", "nio4r #{@versions["nio4r"]}: NIO::Selector", :peer),
        Server.ruby("eventmachine", "EventMachine #{@versions["eventmachine"]} (EM.epoll)", :peer),
        Server.ruby("io_select", "plain IO.select loop", :peer),
        Server.ruby("threads", "thread per connection", :peer)
      ]
      only = ENV.fetch("EVIX_BENCH_SERVERS", "").split(",").map(&:strip)
      only.empty? ? all : all.select { |s| only.include?(s.name) }
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
    def median_of_rounds(names, key)
      rounds = Array.new(@config.rounds) { names.to_h { |name| [name, yield(name)] } }
      names.to_h do |name|
        runs = rounds.map { |round| round[name] }
        ok = runs.reject { |run| run["error"] }.sort_by { |run| run[key] }
        [name, ok.empty? ? runs.first : ok[ok.size / 2]]
      end
    end

    # The sentence saying so, for the intros of the sections that do it.
    def rounds_note(who = "servers")
      return "" if @config.rounds == 1

      " Each figure is the median run (by throughput, resp. wall time) of #{@config.rounds}, the #{who} taking turns."
    end

    def failed_row(label, result, columns)
      ["#{label} (failed: #{result["error"].tr("|", "/")})", *Array.new(columns - 1, "-")]
    end

    def header
      cpu = File.foreach("/proc/cpuinfo").find { |l| l.start_with?("model name") }&.split(":", 2)&.last&.strip
      <<~MD.chomp
        # evix benchmarks: side by side with the Ruby peers and a raw Rust ceiling

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

    def evix_revision
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

    def notes
      <<~MD.chomp
        ## How to read this

        - These machines are shared and noisy (±10–25 % run to run): compare ratios within one run, not
          absolute figures across runs.
        - The load generator (bench/loadgen, Rust, one thread, epoll) keeps one message in flight per
          connection and checks every echoed byte; a server that corrupts, drops or reorders data fails its row.
        - Latency is per round trip as the client sees it, including its own queueing at 100+ connections.
        - At 100 and 1,000 connections the single client core saturates before the fast servers do: compare
          CPU µs per round trip there, not round trips/s.
      MD
    end

    def profile
      path = File.join(Harness::ROOT, "bench", "PROFILE.md")
      File.read(path).strip if File.exist?(path) && !@config.quick
    end
  end
end
