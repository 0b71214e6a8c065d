# frozen_string_literal: true

module Bench
  # The targets against async 1.30 (the Ruby 3.1 lane) and against today's
  # peers (async 2, the Ruby 3.3 lane), checked against this run's figures.
  module Targets
    private

    def targets_section(rows)
      return nil if rows.empty?

      "## Targets (#{targets_name}), from this run\n\n" \
        "#{Report.table(%w[Target Measured Needed Met], rows, align: "llll")}"
    end

    # Which targets this lane judges: against async 2 where it is the peer, else against async 1.30.
    def targets_name
      modern_targets? ? "against async 2" : "against async 1.30"
    end

    def modern_targets?
      @versions["async"].to_s >= "2"
    end

    # [target, measured, needed, met] for each target this lane judges.
    def target_rows
      rows = if modern_targets?
               [*paced_targets, *modern_echo_targets, *scheduler_workload_targets]
             else
               [*echo_targets, *syscall_targets, *http_targets, *timer_targets, *fiber_targets, *idle_targets]
             end
      rows + rack_targets
    end

    # Server CPU per round trip at the fixed rate, against the ceiling's, where both delivered it.
    def paced_targets
      return [] unless @results[:rate]

      @results[:rate].keys.flat_map do |n|
        ceiling = delivered_figure(:rate, n, "ceiling")
        { "evix_fiber" => 1.1, "evix_scheduler" => 1.15, "evix_callback" => 1.05 }.map do |name, limit|
          ratio_row("fixed rate x#{n}: #{name} CPU/rt vs ceiling (n/a unless both delivered the rate)",
                    delivered_figure(:rate, n, name)&.dig("cpu_us"), ceiling&.dig("cpu_us"), limit)
        end
      end
    end

    def delivered_figure(*path)
      result = figure(*path)
      result if result && delivered?(result)
    end

    # Closed-loop throughput against async 2's best row and nio4r.
    def modern_echo_targets
      return [] unless @results[:echo]

      @results[:echo].keys.select { |n| n >= 100 || @config.quick }.flat_map do |n|
        at = ->(name) { figure(:echo, n, name)&.dig("rps") }
        async = [at.call("async_scheduler"), at.call("async_stream")].compact.max
        [ratio_row("echo x#{n}: fiber server rt/s vs best async 2 row", at.call("evix_fiber"), async, 1.5,
                   at_most: false),
         ratio_row("echo x#{n}: Evix::Scheduler rt/s vs best async 2 row", at.call("evix_scheduler"), async, 1.5,
                   at_most: false),
         ratio_row("echo x#{n}: fiber server rt/s vs nio4r", at.call("evix_fiber"), at.call("nio4r"), 1.0,
                   at_most: false),
         ratio_row("echo x#{n}: callback server rt/s vs nio4r", at.call("evix_callback"), at.call("nio4r"), 1.2,
                   at_most: false)]
      end
    end

    # Evix::Scheduler's speed-up over threads against async's, per workload,
    # and its mean over the I/O workloads.
    def scheduler_workload_targets
      return [] unless @results[:scheduler]

      wall = ->(name, impl) { figure(:scheduler, name, impl)&.dig("wall_s") }
      speedup = ->(name, impl) { quotient(wall.call(name, "threads"), wall.call(name, impl)) }
      rows = SchedulerWorkloads::SCHEDULER_WORKLOADS.keys.map do |name|
        ratio_row("#{name}: evix speed-up over threads vs async's", speedup.call(name, "evix"),
                  speedup.call(name, "async"), 1.3, at_most: false)
      end
      ups = SchedulerWorkloads::IO_WORKLOADS.map { |name| speedup.call(name, "evix") }
      mean = ups.all? ? ups.sum / ups.size : nil
      io = SchedulerWorkloads::IO_WORKLOADS.join(", ")
      rows << target("I/O workloads (#{io}): evix's mean speed-up over threads",
                     mean && format("%.2fx", mean), "≥ 3.00x", mean && mean >= 3)
    end

    # A row: the target, the measured ratio or value, what it needs, and
    # whether it is met (nil when a figure is missing).
    def target(name, measured, needed, met)
      verdict = { true => "yes", false => "**no**", nil => "n/a" }.fetch(met)
      [name, measured.nil? ? "-" : measured, needed, verdict]
    end

    def figure(*path)
      value = @results.dig(*path)
      value.is_a?(Hash) && value["error"] ? nil : value
    end

    def quotient(num, den)
      num && den && !den.zero? ? num.fdiv(den) : nil
    end

    def ratio_row(name, num, den, limit, at_most: true)
      value = quotient(num, den)
      met = value && (at_most ? value <= limit : value >= limit)
      target(name, value && format("%.2fx", value), "#{at_most ? "≤" : "≥"} #{format("%.2f", limit)}x", met)
    end

    def echo_targets
      return [] unless @results[:echo]

      @results[:echo].keys.select { |n| n >= 100 || @config.quick }.flat_map do |n|
        at = ->(name, key) { figure(:echo, n, name)&.dig(key) }
        async = [at.call("async_wrapper", "rps"), at.call("async_scheduler", "rps")].compact.max
        [
          ratio_row("echo x#{n}: fiber server CPU/rt vs ceiling", at.call("evix_fiber", "cpu_us"),
                    at.call("ceiling", "cpu_us"), 1.15),
          ratio_row("echo x#{n}: fiber server rt/s vs best async 1.30 row", at.call("evix_fiber", "rps"), async, 1.5,
                    at_most: false),
          ratio_row("echo x#{n}: fiber server rt/s vs nio4r", at.call("evix_fiber", "rps"), at.call("nio4r", "rps"),
                    1.0, at_most: false),
          ratio_row("echo x#{n}: callback server CPU/rt vs ceiling", at.call("evix_callback", "cpu_us"),
                    at.call("ceiling", "cpu_us"), 1.05)
        ]
      end + scheduler_targets
    end

    def scheduler_targets
      @results[:echo].keys.map do |n|
        ratio_row("echo x#{n}: Evix::Scheduler rt/s vs async 1.30's scheduler",
                  figure(:echo, n, "evix_scheduler")&.dig("rps"), figure(:echo, n, "async_scheduler")&.dig("rps"),
                  1.5, at_most: false)
      end
    end

    def syscall_targets
      return [] unless @results[:syscalls]

      %w[perf strace].filter_map do |tool|
        counts = figure(:syscalls, "evix_fiber")&.dig(tool)
        next if counts.nil? && tool == "perf"

        total = counts&.values&.sum
        target("system calls per echo round trip, fiber server (#{tool})", total && format("%.2f", total), "≤ 3",
               total && total <= 3)
      end
    end

    def http_targets
      return [] unless @results[:http]

      %w[evix_fiber evix_callback evix_scheduler].map do |name|
        ratio_row("HTTP hello: #{name} req/s vs nio4r", figure(:http, name)&.dig("rps"),
                  figure(:http, "nio4r")&.dig("rps"), 1.0, at_most: false)
      end
    end

    def timer_targets
      return [] unless @results[:timers]

      evix = figure(:timers, "evix")
      group = figure(:timers, "timers_group")
      last = evix&.dig("last_lateness_s")
      [ratio_row("timers: scheduling speed vs Timers::Group", group&.dig("schedule_s"), evix&.dig("schedule_s"),
                 10, at_most: false),
       target("timers: the last fires within 20 ms of its deadline", last && "#{Report.ms(last, 2)} ms",
              "≤ 20 ms", last && last <= 0.020)]
    end

    def fiber_targets
      return [] unless @results[:fibers]

      async_hwm = figure(:fibers, "async")&.dig("hwm_kib")
      %w[evix_scheduler evix_spawn].flat_map do |impl|
        r = figure(:fibers, impl)
        [ratio_row("fibers (#{impl}): wall time vs ideal", r&.dig("wall_s"), r&.dig("ideal_s"), 2.5),
         ratio_row("fibers (#{impl}): peak RSS vs async 1.30", r&.dig("hwm_kib"), async_hwm, 0.75)]
      end
    end

    def idle_targets
      return [] unless @results[:idle]

      [%w[evix_fiber async_wrapper], %w[evix_callback async_wrapper],
       %w[evix_scheduler async_scheduler]].map do |ours, theirs|
        ratio_row("idle connections: #{ours} peak RSS vs #{theirs}", figure(:idle, ours)&.dig("hwm_kib"),
                  figure(:idle, theirs)&.dig("hwm_kib"), 0.5)
      end
    end
  end
end
