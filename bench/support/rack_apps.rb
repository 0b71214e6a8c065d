# frozen_string_literal: true

require_relative "rack_servers"
require_relative "../../spec/fixtures/apps/postgres_cluster"

module Bench
  # Rack apps (spec/fixtures/apps, the apps the specs run) on `evix serve`
  # and the Rack servers Ruby developers use, measured from outside with wrk:
  # one table per app and load, every server of the table in the same run.
  module RackApps
    # A row group: +app+ (spec/fixtures/apps/APP.ru) at +connections+, GET
    # +path+, on +servers+; +cpu+ the cores the servers get (wrk keeps CPU 1).
    Scenario = Struct.new(:key, :title, :app, :connections, :path, :servers, :cpu, keyword_init: true)

    ONE_PROCESS = %w[evix puma5 puma16 falcon async_http thin].freeze
    SCENARIOS = [
      Scenario.new(key: "hello", title: "Rack hello", app: "hello", connections: 100,
                   servers: [*ONE_PROCESS, "ceiling"]),
      Scenario.new(key: "sleep100", title: "`sleep 0.01` app", app: "sleep", connections: 100, servers: ONE_PROCESS),
      Scenario.new(key: "sleep1000", title: "`sleep 0.01` app", app: "sleep", connections: 1000,
                   servers: ONE_PROCESS),
      Scenario.new(key: "sinatra", title: "Sinatra hello", app: "sinatra", connections: 100, servers: ONE_PROCESS),
      Scenario.new(key: "rails", title: "Rails API hello", app: "rails", connections: 100, servers: ONE_PROCESS),
      Scenario.new(key: "pg", title: "PostgreSQL `SELECT pg_sleep(0.01)`, pool of 20", app: "pg",
                   connections: 100, path: "/?sleep=0.01", servers: ONE_PROCESS),
      Scenario.new(key: "workers", title: "Rack hello, two worker processes", app: "hello", connections: 100,
                   servers: %w[evix_workers puma_workers], cpu: "0,1")
    ].freeze
    # What an app needs beyond Rack, to tell a missing gem from a failing server.
    APP_LIBRARIES = { "sinatra" => "sinatra/base", "rails" => "action_controller/railtie", "pg" => "pg" }.freeze
    IDLE_SERVERS = %w[evix puma16 falcon async_http thin].freeze
    # wrk's per-request timeout: a server that queues requests longer shows
    # them as errors, not as a stalled run.
    WRK_TIMEOUT = 5

    private

    def rack_section
      @rack_servers = (RackServers.all(@versions) + [RackServers.ceiling]).select { |s| rack_server_wanted?(s.name) }
      scenarios = SCENARIOS.select { |s| rack_scenario_wanted?(s.key) }
      @results[:rack] = scenarios.to_h { |scenario| [scenario.key, rack_scenario(scenario)] }
      @results[:rack_idle] = rack_idle if rack_scenario_wanted?("idle")
      tables = scenarios.map { |scenario| rack_table(scenario, @results[:rack][scenario.key]) }
      tables << rack_idle_table(@results[:rack_idle]) if @results[:rack_idle]
      ["## Rack apps on HTTP servers", rack_intro, *tables].join("\n\n")
    end

    def rack_intro
      notes = RackServers.notes.map { |note| "\n\n#{note}" }.join
      "The apps of spec/fixtures/apps (the ones the specs run), each server started as its users start it " \
        "(RACK_ENV=production), `wrk -t1` on CPU 1 with keep-alive, the server on CPU 0 (both CPUs for the " \
        "two-worker rows), #{@config.http_seconds} s measured after a 1 s warm-up, a fresh server per point. " \
        "CPU µs/req is utime + stime of the server and every process it forked over the measured run, per " \
        "request wrk counted, and CPU busy that CPU per second (100 % is one core busy: a one-process server " \
        "below it waits on something other than its CPU); RSS is each process's peak (VmHWM), the largest when " \
        "there are several. " \
        "Errors are wrk's socket errors, timeouts (#{WRK_TIMEOUT} s) and non-2xx answers. " \
        "PostgreSQL runs unpinned, from a fresh cluster in a temporary directory. thin closes the connection " \
        "after a response without content-length (the hello and Rails apps send none), so wrk reconnects and " \
        "counts those closes as errors.#{rounds_note}#{notes}"
    end

    def rack_server_wanted?(name)
      only = ENV.fetch("EVIX_BENCH_RACK_SERVERS", "").split(",").map(&:strip)
      only.empty? || only.include?(name)
    end

    def rack_scenario_wanted?(key)
      only = ENV.fetch("EVIX_BENCH_RACK_APPS", "").split(",").map(&:strip)
      only.empty? || only.include?(key)
    end

    def rack_server(name)
      @rack_servers.find { |s| s.name == name }
    end

    def rack_scenario(scenario)
      missing = app_missing(scenario.app)
      return { "error" => missing } if missing

      names = scenario.servers.select { |name| rack_server(name) }
      with_app_env(scenario.app) do |env|
        median_of_rounds(names, "rps") { |name| rack_point(rack_server(name), scenario, env) }
      end
    rescue Harness::Failure, SystemCallError, RuntimeError => e
      { "error" => e.message.lines.first.to_s.strip }
    end

    # Why this Ruby cannot run +app+ (a gem it lacks), or nil.
    def app_missing(app)
      library = APP_LIBRARIES.fetch(app, "rack")
      out = IO.popen(RackServers.env, [RbConfig.ruby, "-e", "require #{library.dump}"], err: %i[child out], &:read)
      "Ruby #{RUBY_VERSION} here lacks #{library}: #{out.lines.grep(/Error/).first.to_s.strip[0, 120]}" unless
        $CHILD_STATUS.success?
    end

    # The pg app gets a fresh PostgreSQL cluster for its rows.
    def with_app_env(app, &)
      return yield({}) unless app == "pg"

      reason = EvixApps::PostgresCluster.unavailable_reason
      raise Harness::Failure, reason if reason

      EvixApps::PostgresCluster.start { |cluster| yield cluster.env.merge("EVIX_APP_PG_POOL" => "20") }
    end

    def rack_point(server, scenario, env)
      path = scenario.path || "/"
      attempt("rack #{scenario.key} #{server.name}") do
        RackServerRun.with(server, scenario.app, path: path, env: env,
                                                 cpu: scenario.cpu || Harness::SERVER_CPU) do |run|
          wrk = lambda { |seconds|
            Harness.run_wrk(run.port, connections: scenario.connections, seconds: seconds, path: path,
                                      timeout: WRK_TIMEOUT)
          }
          wrk.call(1) unless @config.quick
          rack_measure(run) { wrk.call(@config.http_seconds) }
        end
      end
    end

    # wrk's result from the block, with the server's CPU per request and its peak RSS.
    def rack_measure(run)
      before = run.cpu_seconds
      result = yield
      cpu = run.cpu_seconds - before
      memories = run.memories
      result.merge("cpu_us" => result["requests"].positive? ? cpu * 1e6 / result["requests"] : nil,
                   "hwm_kib" => memories.filter_map { |m| m["VmHWM"] }.max, "processes" => memories.size)
    end

    RACK_HEADER = ["Server", "Requests/s", "min–max", "p50 ms", "p99 ms", "Errors", "CPU µs/req", "CPU busy",
                   "RSS MiB/process", "req/s vs best Puma", "req/s vs Falcon", "req/s vs ceiling",
                   "CPU/req vs best Puma"].freeze

    def rack_table(scenario, results)
      title = "### #{scenario.title}, `wrk -c#{Report.int(scenario.connections)}`"
      return "#{title}\n\nNot run: #{results["error"]}" if results["error"]

      references = { puma: best_puma(results), falcon: ok(results["falcon"]), ceiling: ok(results["ceiling"]) }
      rows = scenario.servers.select { |name| results.key?(name) }.map do |name|
        label = rack_server(name).label
        if results[name]["error"]
          failed_row(label, results[name], RACK_HEADER.size)
        else
          rack_row(label, results[name], references)
        end
      end
      "#{title}\n\n#{Report.table(RACK_HEADER, rows)}"
    end

    def rack_row(label, result, references)
      rps = ->(reference) { Report.ratio(result["rps"], references[reference]&.dig("rps")) }
      [label, Report.int(result["rps"]), range(result, "rps", 0), Report.ms(result["p50_us"]&./(1e6), 2),
       Report.ms(result["p99_us"]&./(1e6), 1), Report.int(result["errors"]), Report.float(result["cpu_us"], 1),
       busy(result), rss_per_process(result), rps.call(:puma), rps.call(:falcon), rps.call(:ceiling),
       Report.ratio(result["cpu_us"], references[:puma]&.dig("cpu_us"))]
    end

    def rss_per_process(result)
      processes = result["processes"].to_i
      "#{Report.mib(result["hwm_kib"])}#{" (#{processes} processes)" if processes > 1}"
    end

    # The server's CPU seconds per second of the run (100 % is one core busy).
    def busy(result)
      return "-" unless result["cpu_us"] && result["rps"]

      "#{(result["cpu_us"] * result["rps"] / 1e4).round} %"
    end

    def ok(result)
      result unless result.nil? || result["error"]
    end

    # The Puma row with the most requests/s (its two thread counts, or its cluster).
    def best_puma(results)
      %w[puma5 puma16 puma_workers].filter_map { |name| ok(results[name]) }.max_by { |r| r["rps"] }
    end

    # --- idle keep-alive connections ----------------------------------------------------------

    def rack_idle
      count = @config.idle_connections
      IDLE_SERVERS.select { |name| rack_server(name) }.to_h do |name|
        [name, attempt("rack idle #{name} x#{count}") { rack_idle_point(idle_server(name, count), count) }]
      end
    end

    # evix serve holds at most --max-requests-in-flight connections (default
    # 1,024) before it stops accepting: for this row it is raised past +count+.
    def idle_server(name, count)
      return rack_server(name) unless name == "evix"

      RackServers.evix(options: ["--max-requests-in-flight", (count + 1000).to_s])
    end

    # The server's RSS after a warm-up and with +count+ kept-alive
    # connections open, each having had one request answered.
    def rack_idle_point(server, count)
      RackServerRun.with(server, "hello") do |run|
        Harness.run_wrk(run.port, connections: 10, seconds: 1) unless @config.quick
        before = run.memories.sum { |m| m["VmRSS"].to_i }
        client = Harness::Child.new([Harness.loadgen, "idle", "--http", "--port", run.port.to_s, "--connections",
                                     count.to_s, "--sync"], cpu: Harness::CLIENT_CPU, stdin: true)
        held = JSON.parse(client.expect(/\A\{/, 300))
        sleep 0.5 # let a server that parks connections after answering do so
        open = run.memories.sum { |m| m["VmRSS"].to_i }
        client.puts("close")
        client.finish(stop: false, grace: 30)
        client.cleanup
        { "rss_before_kib" => before, "rss_open_kib" => open, "kib_per_connection" => (open - before).fdiv(count),
          "open_s" => held["open_s"] }
      end
    end

    def rack_idle_table(results)
      count = @config.idle_connections
      header = ["Server", "RSS before MiB", "RSS with #{Report.int(count)} open MiB", "KiB per connection", "Open s"]
      rows = results.map do |name, r|
        label = idle_server(name, count).label
        next failed_row(label, r, header.size) if r["error"]

        [label, Report.mib(r["rss_before_kib"]), Report.mib(r["rss_open_kib"]), Report.float(r["kib_per_connection"]),
         Report.float(r["open_s"], 2)]
      end
      "### #{Report.int(count)} idle keep-alive connections (Rack hello)\n\nEach connection has one request " \
        "answered (`loadgen idle --http`) and is then held open; the server's RSS (all its processes) after a " \
        "1 s warm-up, then with every connection open.\n\n#{Report.table(header, rows)}"
    end

    # --- targets ----------------------------------------------------------------------------

    # [name, scenario, what evix serve's req/s is divided by, limit]: all "at least".
    RACK_RATIO_TARGETS = [
      ["Rack hello: evix serve req/s vs best Puma", "hello", :puma, 4],
      ["Rack hello: evix serve req/s vs Falcon", "hello", "falcon", 4],
      ["Rack hello: evix serve req/s vs raw Rust ceiling", "hello", "ceiling", 0.5],
      ["sleep 0.01 x100: evix serve req/s vs the ideal 10,000", "sleep100", 10_000, 0.9],
      ["sleep 0.01 x1,000: evix serve req/s vs Falcon", "sleep1000", "falcon", 5],
      ["Sinatra: evix serve req/s vs best Puma", "sinatra", :puma, 1.5],
      ["Rails API: evix serve req/s vs best Puma", "rails", :puma, 1.5]
    ].freeze

    def rack_targets
      return [] unless @results[:rack]

      rows = RACK_RATIO_TARGETS.map do |name, key, reference, limit|
        ratio_row(name, rack_figure(key, "evix", "rps"), rack_reference(key, reference), limit, at_most: false)
      end
      puma_p99 = %w[puma5 puma16].filter_map { |name| rack_figure("sinatra", name, "p99_us") }.min
      rows << ratio_row("Sinatra: evix serve p99 vs the lower Puma p99", rack_figure("sinatra", "evix", "p99_us"),
                        puma_p99, 1.0)
      idle = ok(@results[:rack_idle]&.dig("evix"))&.dig("kib_per_connection")
      rows << target("idle keep-alive connections: evix serve KiB each beyond the base", idle && format("%.1f", idle),
                     "< 10", idle && idle < 10)
    end

    # One figure of a server's row, nil when the scenario or the row failed or did not run.
    def rack_figure(key, name, figure)
      ok(@results[:rack][key])&.then { |results| ok(results[name]) }&.dig(figure)
    end

    def rack_reference(key, reference)
      case reference
      when :puma then ok(@results[:rack][key])&.then { |results| best_puma(results) }&.dig("rps")
      when Numeric then reference if @results[:rack].key?(key)
      else rack_figure(key, reference, "rps")
      end
    end
  end
end
