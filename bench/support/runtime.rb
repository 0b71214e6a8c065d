# frozen_string_literal: true

module Bench
  # The workloads inside one process: timers, fibers, and bench/micro.rb.
  module Runtime
    TIMER_IMPLS = { "evix" => "evix: Loop#add_timer",
                    "timers_group" => "Timers::Group (async 1.30's timer queue)" }.freeze
    FIBER_IMPLS = { "evix_scheduler" => "evix: Evix.run + Fiber.schedule + Kernel#sleep",
                    "evix_spawn" => "evix: Loop#spawn + Loop#sleep",
                    "async" => "async 1.30: Async { task.async { sleep } }" }.freeze
    FIBER_SLEEPS = 10

    private

    # Runs a bench/workloads script pinned to the server core; its JSON line.
    def workload(script, *args, timeout: 300)
      path = File.join(Harness::ROOT, "bench", "workloads", script)
      child = Harness::Child.new(Harness.ruby_command(path, *args), cpu: Harness::SERVER_CPU)
      line = child.expect(/\A\{/, timeout)
      status = child.finish(stop: false, grace: 30)
      raise Harness::Failure, child.errors unless status&.success?

      JSON.parse(line)
    ensure
      child&.cleanup
    end

    # --- redis-benchmark -----------------------------------------------------------------

    # bench/redis.rb in a child process: exe/evix kv beside Debian's redis-server.
    def redis_section
      requests = @config.quick ? 2_000 : 100_000
      script = File.join(Harness::ROOT, "bench", "redis.rb")
      env = Harness.child_env.merge("EVIX_BENCH_ROUNDS" => @config.rounds.to_s)
      result = attempt("redis") do
        table = IO.popen(env, [RbConfig.ruby, script, requests.to_s], err: %i[child out], &:read)
        raise Harness::Failure, table.lines.last(3).join(" ") unless Process.last_status.success?

        { "table" => table.strip }
      end
      @results[:redis] = result
      "## redis-benchmark: `exe/evix kv` against redis-server\n\nThe kv example (examples/kv.rb, RESP on " \
        "Evix::TCPServer) and Debian's redis-server (C, its own event loop) under `redis-benchmark`, the " \
        "servers taking turns.\n\n#{result["error"] ? "Failed: #{result["error"]}" : result["table"]}"
    end

    # --- timers -----------------------------------------------------------------------------

    def timers_section
      count = @config.timers
      results = TIMER_IMPLS.keys.to_h do |impl|
        [impl, attempt("timers #{impl}") { workload("timers.rb", impl, count) }]
      end
      @results[:timers] = results
      "## #{Report.int(count)} one-shot timers, delays in [0, 50 ms)\n\n#{timers_intro}\n\n" \
        "#{timers_table(results, count)}"
    end

    def timers_table(results, count)
      evix = results["evix"]
      header = ["Implementation", "Schedule ms", "Scheduled/s", "Last fires after scheduling ms",
                "Lateness of the last ms", "Lateness p50 ms", "Lateness p99 ms", "Schedule time vs evix"]
      rows = TIMER_IMPLS.map do |impl, label|
        r = results[impl]
        next failed_row(label, r, header.size) if r["error"]

        [label, Report.ms(r["schedule_s"]), Report.int(count / r["schedule_s"]), Report.ms(r["last_fired_s"]),
         Report.ms(r["last_lateness_s"], 2), Report.ms(r["lateness_p50_s"], 2), Report.ms(r["lateness_p99_s"], 2),
         Report.ratio(r["schedule_s"], evix["error"] ? nil : evix["schedule_s"])]
      end
      Report.table(header, rows)
    end

    def timers_intro
      "A fresh process per implementation, the same random delays, one warm-up with a tenth of them. " \
        "Lateness = fire time − max(deadline, end of scheduling): nothing can fire while the process is " \
        "still scheduling, so it measures the loop; each deadline is the timer's delay after its " \
        "(interpolated) scheduling instant. \"Last\" is the timer due last."
    end

    # --- fibers -----------------------------------------------------------------------------

    def fibers_section
      count = @config.fibers
      results = median_of_rounds(FIBER_IMPLS.keys, "wall_s") do |impl|
        attempt("fibers #{impl}") { workload("fibers.rb", impl, count, FIBER_SLEEPS) }
      end
      @results[:fibers] = results
      "## #{Report.int(count)} concurrent fibers x #{FIBER_SLEEPS} x `sleep 0.01`\n\n#{fibers_intro}\n\n" \
        "#{fibers_table(results)}"
    end

    def fibers_intro
      "A fresh process per implementation. Every fiber is spawned and parks at once (`Fiber.yield`), so " \
        "all of them are alive together; then all are resumed and each sleeps #{FIBER_SLEEPS} times 10 ms " \
        "through its library. Spawn: until every fiber is parked. Wall: from the release until the last " \
        "one ends (ideal #{FIBER_SLEEPS * 10} ms). RSS and Ruby objects per fiber: what the process grew by " \
        "from the start until every fiber was parked, divided by the fibers.#{rounds_note("implementations")}"
    end

    def fibers_table(results)
      async = results["async"]
      header = ["Implementation", "Spawn ms", "Wall ms", "Wall vs ideal", "Peak RSS MiB", "KiB per parked fiber",
                "Objects per fiber", "Peak RSS vs async"]
      rows = FIBER_IMPLS.map do |impl, label|
        r = results[impl]
        next failed_row(label, r, header.size) if r["error"]

        [label, Report.ms(r["spawn_s"]), Report.ms(r["wall_s"]), Report.ratio(r["wall_s"], r["ideal_s"]),
         Report.mib(r["hwm_kib"]), Report.float(r["rss_per_fiber_kib"]), Report.float(r["objects_per_fiber"]),
         Report.ratio(r["hwm_kib"], async["error"] ? nil : async["hwm_kib"])]
      end
      Report.table(header, rows)
    end

    # --- bench/micro.rb ---------------------------------------------------------------------

    def micro_section
      out = File.join(File.dirname(output_path), "RESULTS-micro.md")
      FileUtils.mkdir_p(File.dirname(out))
      env = Harness.child_env.merge("EVIX_BENCH_SCALE" => @config.micro_scale.to_s, "EVIX_BENCH_OUT" => out)
      warn "bench: micro.rb"
      text = IO.popen(env, ["taskset", "-c", Harness::SERVER_CPU,
                            *Harness.ruby_command(File.join(Harness::ROOT, "bench", "micro.rb"))],
                      err: %i[child out], &:read)
      unless $CHILD_STATUS.success?
        reason = text.lines.find { |l| l.match?(/Error|\[BUG\]/) }&.strip || "exit #{$CHILD_STATUS.exitstatus}"
        return "## Micro-benchmarks (bench/micro.rb)\n\nfailed: `#{reason}`"
      end

      body = text.lines.drop_while { |l| !l.start_with?("|") }.reject { |l| l.start_with?("wrote ") }.join.strip
      "## Micro-benchmarks (bench/micro.rb): timers, immediates, cross-thread wake-ups\n\n" \
        "In one process, best of 3 after a warm-up, pinned to CPU 0 (also written to " \
        "#{File.basename(out)}).\n\n#{body}"
    end
  end
end
