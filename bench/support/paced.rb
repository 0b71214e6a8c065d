# frozen_string_literal: true

module Bench
  # The server's cost when it is not the bottleneck: the load generator's
  # open-loop mode (`loadgen echo --rate R`) sends on a fixed schedule, so
  # every server does the same work and its CPU per round trip compares even
  # where the client core, not the server, limits closed-loop throughput.
  module Paced
    # A rate passes when the server keeps up with it and p99 stays under this.
    P99_LIMIT_US = 10_000
    # ... and delivers at least this share of the scheduled round trips.
    KEPT_UP = 0.97
    # The search for the highest passing rate (from half the fixed rate):
    # growth per step, bisections, and a bound.
    SEARCH_GROWTH = 1.25
    SEARCH_BISECTIONS = 3

    private

    # --- CPU per round trip at one fixed rate -------------------------------------------------

    def rate_section
      rate = @config.rate
      @results[:rate] = @config.paced_connections.to_h do |connections|
        [connections, median_of_rounds(paced_servers, "cpu_us") { |name| rate_point(server(name), connections, rate) }]
      end
      tables = @results[:rate].map do |connections, results|
        "### #{Report.int(connections)} connections\n\n#{rate_table(results)}"
      end
      "## Fixed rate: server CPU per round trip at #{Report.int(rate)} round trips/s\n\n#{rate_intro}\n\n" \
        "#{tables.join("\n\n")}"
    end

    def rate_intro
      "The load generator sends #{Network::MESSAGE_SIZE}-byte messages on a fixed schedule (`loadgen echo " \
        "--rate`: send k is due at k / rate seconds, on connection k mod N, queued behind that connection's " \
        "unanswered one), " \
        "so every server does the same work whether or not it could do more. Latency runs from each send's due " \
        "time, so a server that falls behind shows its queue. CPU µs/rt is the server's utime + stime over the " \
        "#{@config.duration} s window divided by the round trips in it; the median of #{@config.rounds} rounds, " \
        "the servers taking turns, with the lowest and highest round beside it. \"Kept up\": at least " \
        "#{(KEPT_UP * 100).round} % of the scheduled round trips with p99 under #{P99_LIMIT_US / 1000} ms; the " \
        "CPU targets compare servers that delivered those #{(KEPT_UP * 100).round} %, whatever their p99."
    end

    def rate_point(server, connections, rate)
      attempt("rate #{server.name} x#{connections} @#{rate}") do
        Harness::ServerRun.with(server.for_mode("echo")) do |run|
          result = Harness.run_loadgen(
            ["echo", "--port", run.port, "--connections", connections, "--size", Network::MESSAGE_SIZE, "--rate", rate,
             "--warmup", @config.warmup, "--duration", @config.duration, "--server-pid", run.pid],
            timeout: @config.warmup + @config.duration + 120
          )
          with_costs(result, run, result["round_trips"])
        end
      end
    end

    # Did the work asked of it: at least KEPT_UP of the scheduled round trips, without errors.
    # CPU per round trip compares between servers that all delivered the same rate.
    def delivered?(result)
      !result["saturated"] && result["errors"].to_i.zero? && result["rps"] >= result["rate"] * KEPT_UP
    end

    # ... and with p99 under the limit: what the highest-rate search asks.
    def kept_up?(result)
      delivered?(result) && result["p99_us"] < P99_LIMIT_US
    end

    def rate_table(results)
      ceiling = results["ceiling"]
      header = ["Server", "Round trips/s", "p50 µs", "p99 µs", "Kept up", "CPU µs/rt", "min–max",
                "CPU vs ceiling"]
      rows = paced_servers.map do |name|
        r = results[name]
        next failed_row(server(name).label, r, header.size) if r["error"]

        [server(name).label, Report.int(r["rps"]), Report.float(r["p50_us"]), Report.float(r["p99_us"]),
         kept_up?(r) ? "yes" : "**no**", Report.float(r["cpu_us"], 2), range(r, "cpu_us", 2),
         Report.ratio(r["cpu_us"], ceiling && !ceiling["error"] ? ceiling["cpu_us"] : nil)]
      end
      Report.table(header, rows)
    end

    # --- the highest rate kept up with -----------------------------------------------------

    def maxrate_section
      @results[:maxrate] = @config.paced_connections.to_h do |connections|
        rounds = median_of_rounds(paced_servers, "rate", rounds: @config.maxrate_rounds) do |name|
          maxrate_point(server(name), connections)
        end
        [connections, rounds]
      end
      tables = @results[:maxrate].map do |connections, results|
        "### #{Report.int(connections)} connections\n\n#{maxrate_table(results)}"
      end
      "## The highest fixed rate each server keeps up with\n\n#{maxrate_intro}\n\n#{tables.join("\n\n")}"
    end

    def maxrate_intro
      "One server process and one load generator per search: rates from #{Report.int(search_start)} round " \
        "trips/s up by #{SEARCH_GROWTH}x per step until one is not kept up with (as above: " \
        "#{(KEPT_UP * 100).round} % delivered, p99 under #{P99_LIMIT_US / 1000} ms), then #{SEARCH_BISECTIONS} " \
        "bisections; #{@config.maxrate_seconds} s per step. The load generator's own core limits the fastest " \
        "servers here, as in the closed-loop rows: the ceiling's figure is that limit." \
        "#{rounds_note("servers", @config.maxrate_rounds)}"
    end

    def maxrate_point(server, connections)
      attempt("maxrate #{server.name} x#{connections}") do
        Harness::ServerRun.with(server.for_mode("echo")) do |run|
          client = Harness::Child.new(
            [Harness.loadgen, "echo", "--port", run.port.to_s, "--connections", connections.to_s, "--size",
             Network::MESSAGE_SIZE.to_s, "--rate", search_start.to_s, "--warmup", "0.5", "--duration",
             @config.maxrate_seconds.to_s, "--sync"], cpu: Harness::CLIENT_CPU, stdin: true
          )
          client.expect(/\Awarm/, 120)
          search_rate(client)
        ensure
          client&.puts("close")
          client&.finish(stop: false, grace: 30)
          client&.cleanup
        end
      end
    end

    # The highest rate the client's server keeps up with, and the figures at it.
    def search_rate(client)
      measure = lambda do |rate|
        client.puts("go #{rate.round}")
        JSON.parse(client.expect(/\A\{/, @config.maxrate_seconds + 60))
      end
      best = nil
      rate = search_start
      while rate <= search_cap && kept_up?(result = measure.call(rate))
        best = result
        rate *= SEARCH_GROWTH
      end
      low = best ? best["rate"] : 0
      SEARCH_BISECTIONS.times do
        middle = (low + rate) / 2.0
        result = measure.call(middle)
        if kept_up?(result)
          best = result
          low = middle
        else
          rate = middle
        end
      end
      raise Harness::Failure, "kept up with no rate from #{search_start}" unless best

      best
    end

    def maxrate_table(results)
      ceiling = results["ceiling"]
      header = ["Server", "Highest rate kept up with (rt/s)", "min–max", "p99 µs there", "vs ceiling"]
      rows = paced_servers.map do |name|
        r = results[name]
        next failed_row(server(name).label, r, header.size) if r["error"]

        [server(name).label, Report.int(r["rate"]), range(r, "rate", 0), Report.float(r["p99_us"]),
         Report.ratio(r["rate"], ceiling && !ceiling["error"] ? ceiling["rate"] : nil)]
      end
      Report.table(header, rows)
    end

    def search_start
      @config.rate / 2
    end

    # Past what one client core can send (the quick run stops much sooner).
    def search_cap
      @config.quick ? @config.rate * 4 : 1_000_000
    end

    # --- shared -------------------------------------------------------------------------------

    # The servers worth a paced row: the ceiling, evix's and the event-loop peers.
    def paced_servers
      servers_for("echo").map(&:name) - %w[threads io_select eventmachine]
    end
  end
end
