# frozen_string_literal: true

module Bench
  # Blocking-style Ruby code run three ways (bench/workloads/scheduler.rb):
  # a thread per unit of work, fibers under async's Fiber::Scheduler, fibers
  # under Evix::Scheduler.
  module SchedulerWorkloads
    SCHEDULER_IMPLS = %w[threads async evix].freeze
    SCHEDULER_WORKLOADS = {
      "pipes" => "50 pipe pairs x 10,000 x 1 KiB",
      "socketpairs" => "50 UNIX socket pairs x 10,000 x 1 KiB",
      "mutex_file" => "50 groups of 10 taking a Mutex to append 100 x 1 KiB to a file",
      "queue" => "40 groups of 5 producers x 2,000 items and 10 consumers on a Queue",
      "sleep" => "10,000 x 10 x `sleep 0.01`"
    }.freeze
    # The workloads that move bytes through the kernel.
    IO_WORKLOADS = %w[pipes socketpairs mutex_file].freeze

    private

    def scheduler_section
      @results[:scheduler] = SCHEDULER_WORKLOADS.keys.to_h do |name|
        runs = median_of_rounds(SCHEDULER_IMPLS, "wall_s") do |impl|
          attempt("scheduler #{name} #{impl}") do
            workload("scheduler.rb", impl, name, @config.scheduler_scale, timeout: 600)
          end
        end
        [name, runs]
      end
      "## Fiber::Scheduler workloads: threads, async #{@versions["async"]} and Evix::Scheduler\n\n" \
        "#{scheduler_intro}\n\n#{scheduler_table}"
    end

    def scheduler_intro
      scale = @config.scheduler_scale == 1 ? "" : " (counts scaled by #{@config.scheduler_scale})"
      "The same blocking-style code#{scale}, in a fresh process per run pinned to one core: a thread per unit " \
        "of work, or a fiber per unit (`Fiber.schedule`) under `Async {}` or `Evix.run {}`. Every run checks " \
        "the bytes and items it moved. Speed-up = the threads' wall time / this one's (> 1 is faster than " \
        "threads).#{rounds_note("implementations")}"
    end

    def scheduler_table
      header = ["Workload", "threads s", "async s", "evix s", "async speed-up", "evix speed-up",
                "evix vs async", "evix s min–max"]
      rows = SCHEDULER_WORKLOADS.map do |name, label|
        r = @results[:scheduler][name]
        wall = ->(impl) { r[impl]["error"] ? nil : r[impl]["wall_s"] }
        threads = wall.call("threads")
        ["#{name}: #{label}", *SCHEDULER_IMPLS.map { |impl| Report.float(wall.call(impl), 3) },
         Report.ratio(threads, wall.call("async")), Report.ratio(threads, wall.call("evix")),
         Report.ratio(wall.call("async"), wall.call("evix")), range(r["evix"], "wall_s", 3)]
      end
      Report.table(header, rows)
    end
  end
end
