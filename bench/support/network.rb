# frozen_string_literal: true

module Bench
  # The workloads against servers: echo ping-pong, HTTP hello, idle
  # connections and system calls per round trip.
  module Network
    SYSCALL_SERVERS = %w[ceiling evix_callback evix_fiber evix_scheduler nio4r async_wrapper].freeze
    SYSCALL_CONNECTIONS = 10
    HTTP_CONNECTIONS = 100
    MESSAGE_SIZE = 64

    private

    # --- echo -------------------------------------------------------------------------------

    def echo_section
      @results[:echo] = @config.echo_connections.to_h do |connections|
        rounds = median_of_rounds(servers_for("echo").map(&:name), "rps") do |name|
          echo_point(server(name), connections)
        end
        [connections, rounds]
      end
      tables = @results[:echo].map do |connections, results|
        "### #{Report.int(connections)} connection#{"s" if connections > 1}\n\n#{throughput_table(results)}"
      end
      "## Echo ping-pong, #{MESSAGE_SIZE}-byte messages\n\n#{echo_intro}\n\n#{tables.join("\n\n")}"
    end

    def echo_intro
      "#{@config.duration} s measured after #{@config.warmup} s of warm-up per point, a fresh server process " \
        "per point. CPU µs/rt is the server's utime + stime (/proc/PID/stat) over the measured window divided " \
        "by the round trips in it. Ratios: throughput / reference (> 1 is faster) and CPU per round trip / " \
        "reference (< 1 is cheaper); the best peer is the Ruby peer with the highest throughput, resp. the " \
        "lowest CPU per round trip.#{rounds_note}"
    end

    def echo_point(server, connections)
      attempt("echo #{server.name} x#{connections}") do
        Harness::ServerRun.with(server.for_mode("echo")) do |run|
          result = Harness.run_loadgen(
            ["echo", "--port", run.port, "--connections", connections, "--size", MESSAGE_SIZE,
             "--warmup", @config.warmup, "--duration", @config.duration, "--server-pid", run.pid],
            timeout: @config.warmup + @config.duration + 120
          )
          with_costs(result, run, result["round_trips"])
        end
      end
    end

    def with_costs(result, run, operations)
      cpu = result["server_cpu_s"]
      result.merge("cpu_us" => cpu && operations.positive? ? cpu * 1e6 / operations : nil,
                   "hwm_kib" => run.memory["VmHWM"])
    end

    # Throughput, latency, CPU and RSS with ratios; +results+ by server name.
    def throughput_table(results, unit: "Round trips/s", per: "rt")
      ceiling = results["ceiling"]
      best_rps = best_peer(results) { |r| r["rps"] }
      best_cpu = best_peer(results, min: true) { |r| r["cpu_us"] }
      header = ["Server", unit, "min–max", "p50 µs", "p99 µs", "CPU µs/#{per}", "Peak RSS MiB", "#{per}/s vs ceiling",
                "CPU vs ceiling", "#{per}/s vs best peer", "CPU vs best peer"]
      rows = @servers.select { |s| results.key?(s.name) }.map do |server|
        r = results[server.name]
        next failed_row(server.label, r, header.size) if r["error"]

        [server.label, *throughput_cells(r), *ratios(r, ceiling&.dig("rps"), ceiling&.dig("cpu_us")),
         *ratios(r, best_rps, best_cpu)]
      end
      Report.table(header, rows)
    end

    def throughput_cells(result)
      [Report.int(result["rps"]), range(result, "rps", 0), Report.float(result["p50_us"]),
       Report.float(result["p99_us"]), Report.float(result["cpu_us"], 2), Report.mib(result["hwm_kib"])]
    end

    # Throughput and CPU per operation of +result+ against a reference.
    def ratios(result, rps, cpu_us)
      [Report.ratio(result["rps"], rps), Report.ratio(result["cpu_us"], cpu_us)]
    end

    # The best value among the Ruby peers' successful results.
    def best_peer(results, min: false, &value)
      values = @servers.select { |s| s.group == :peer && !s.http_only }.filter_map do |s|
        r = results[s.name]
        value.call(r) unless r.nil? || r["error"]
      end
      min ? values.min : values.max
    end

    # --- http -------------------------------------------------------------------------------

    def http_section
      results = median_of_rounds(@servers.map(&:name), "rps") { |name| http_point(server(name)) }
      @results[:http] = results
      "## HTTP/1.1 keep-alive hello, `wrk -t1 -c#{HTTP_CONNECTIONS}`\n\n" \
        "#{@config.http_seconds} s measured#{" after a 1 s wrk warm-up" unless @config.quick}, a fresh server " \
        "process each; CPU µs per " \
        "request from /proc/PID/stat around the measured run. Every server answers each request (headers up " \
        "to the blank line) with the same 13-byte body. Columns as above, per request.#{rounds_note}\n\n" \
        "#{throughput_table(results, unit: "Requests/s", per: "req")}"
    end

    def http_point(server)
      attempt("http #{server.name}") do
        Harness::ServerRun.with(server.for_mode("http")) do |run|
          Harness.run_wrk(run.port, connections: HTTP_CONNECTIONS, seconds: 1) unless @config.quick
          before = Harness.cpu_seconds(run.pid)
          result = Harness.run_wrk(run.port, connections: HTTP_CONNECTIONS, seconds: @config.http_seconds)
          result["server_cpu_s"] = Harness.cpu_seconds(run.pid) - before
          raise Harness::Failure, "wrk saw #{result["errors"]} socket errors or non-2xx" if result["errors"].positive?

          with_costs(result, run, result["requests"])
        end
      end
    end

    # --- idle connections -------------------------------------------------------------------

    def idle_section
      count = @config.idle_connections
      results = servers_for("echo").to_h { |server| [server.name, idle_point(server, count)] }
      @results[:idle] = results
      "## #{Report.int(count)} idle connections\n\nThe load generator opens the connections in batches of 100 " \
        "(each echoes one 64-byte message, so the server has accepted and served it) and holds them; the " \
        "server's RSS is read from /proc/PID/status before, while they are all open, and its peak (VmHWM).\n\n" \
        "#{idle_table(results, count)}"
    end

    def idle_table(results, count)
      async = results["async_wrapper"]
      header = ["Server", "RSS before MiB", "RSS with #{Report.int(count)} open MiB", "Peak RSS MiB",
                "KiB per connection", "Open s", "Peak RSS vs async (Async::Wrapper)"]
      rows = servers_for("echo").map do |server|
        r = results[server.name]
        next failed_row(server.label, r, header.size) if r["error"]

        [server.label, Report.mib(r["rss_before_kib"]), Report.mib(r["rss_open_kib"]), Report.mib(r["hwm_kib"]),
         Report.float(r["kib_per_connection"]), Report.float(r["open_s"], 2),
         Report.ratio(r["hwm_kib"], async && !async["error"] ? async["hwm_kib"] : nil)]
      end
      Report.table(header, rows)
    end

    def idle_point(server, count)
      attempt("idle #{server.name} x#{count}") do
        Harness::ServerRun.with(server.for_mode("echo")) do |run|
          before = run.memory["VmRSS"]
          client = Harness::Child.new([Harness.loadgen, "idle", "--port", run.port.to_s, "--connections",
                                       count.to_s, "--sync"], cpu: Harness::CLIENT_CPU, stdin: true)
          held = JSON.parse(client.expect(/\A\{/, 300))
          memory = run.memory
          client.puts("close")
          client.finish(stop: false, grace: 30)
          client.cleanup
          { "rss_before_kib" => before, "rss_open_kib" => memory["VmRSS"], "hwm_kib" => memory["VmHWM"],
            "kib_per_connection" => (memory["VmRSS"] - before).fdiv(count), "open_s" => held["open_s"] }
        end
      end
    end

    # --- system calls -----------------------------------------------------------------------

    def syscalls_section
      round_trips = @config.syscall_round_trips
      names = SYSCALL_SERVERS.select { |name| server(name) }
      results = names.to_h { |name| [name, syscall_point(server(name), round_trips)] }
      @results[:syscalls] = results
      tables = TRACERS.filter_map do |tracer, title|
        next if tracer == "perf" && !Harness.perf_syscalls?

        "#{title}\n\n#{syscall_table(names, results, tracer)}"
      end
      "## System calls per echo round trip\n\nExactly #{Report.int(round_trips)} round trips at " \
        "#{SYSCALL_CONNECTIONS} connections, counted on the server (every thread) after the connections are " \
        "open and warmed up, divided by the round trips; twice in the same server process, with each tool.\n\n" \
        "#{tables.join("\n\n")}"
    end

    TRACERS = {
      "perf" => "Counted by the kernel (`perf stat` on the syscall tracepoints: the server runs at full speed):",
      "strace" => "Counted by `strace -c -f -p PID`. strace stops the server twice per call, so it falls far " \
                  "behind the client: its reads find data already there, and the reads that would fail with " \
                  "EAGAIN and the waits that follow them at full speed mostly disappear from these counts:"
    }.freeze

    def syscall_point(server, round_trips)
      attempt("syscalls #{server.name}") do
        Harness::ServerRun.with(server.for_mode("echo")) do |run|
          client = Harness::Child.new(
            [Harness.loadgen, "echo", "--port", run.port.to_s, "--connections", SYSCALL_CONNECTIONS.to_s,
             "--warmup", "0.5", "--count", round_trips.to_s, "--sync"], cpu: Harness::CLIENT_CPU, stdin: true
          )
          client.expect(/\Awarm/, 120)
          tools = Harness.perf_syscalls? ? %w[perf strace] : %w[strace]
          counts = tools.to_h { |tool| [tool, count_round_trips(client, tool, run.pid)] }
          client.puts("close")
          client.finish(stop: false, grace: 30)
          client.cleanup
          counts
        end
      end
    end

    # Calls per round trip, counted by +tool+, while the client does one counted phase.
    def count_round_trips(client, tool, pid)
      result = nil
      count = tool == "perf" ? :perf_syscall_counts : :strace_counts
      calls = Harness.send(count, pid) do
        client.puts("go")
        result = JSON.parse(client.expect(/\A\{/, 300))
      end
      calls.transform_values { |n| n.fdiv(result["round_trips"]) }
    end

    # Calls per round trip by system call (rows) and server (columns), the
    # most frequent first and "other" last.
    def syscall_table(names, results, tracer)
      ok = names.reject { |name| results[name]["error"] }
      counts = ok.map { |name| results[name][tracer] || {} }
      rows = syscall_order(counts).map do |call|
        [call, *counts.map { |c| c.key?(call) ? Report.float(c[call], 2) : "" }]
      end
      rows << ["**total**", *counts.map { |c| "**#{Report.float(c.values.sum, 2)}**" }]
      table = Report.table(["System call", *ok.map { |name| server(name).label }], rows)
      [table, *syscall_failures(names - ok, results)].join("\n\n")
    end

    def syscall_failures(names, results)
      names.map { |name| "- #{server(name).label}: failed: #{results[name]["error"]}" }
    end

    def syscall_order(counts)
      calls = counts.flat_map(&:keys).uniq
      calls.sort_by { |call| [call == "other" ? 1 : 0, -counts.sum { |c| c.fetch(call, 0) }] }
    end
  end
end
