# frozen_string_literal: true

# Loaded with `rspec -r ./spec/reliability/support/gc_stress.rb` (rake
# spec:gc_stress). With EVIX_GC_STRESS set, every example runs with
# GC.stress on, and nothing else:
#
#   EVIX_GC_STRESS=minor  GC.stress = 0x01: a minor GC at every allocation
#                         (old objects are re-marked only through write
#                         barriers: catches a missing barrier or mark at once)
#   EVIX_GC_STRESS=full   GC.stress = true: a full GC at every allocation
#                         (about 100x slower; for small files)
#
# Examples whose assertions are about elapsed time or CPU cannot hold while
# every allocation collects the heap: they are tagged `timing: true` here
# (spec/reliability) or listed in TIMING_EXAMPLES (other files), and left
# out. spec/reliability scales its big loops down under stress (`scaled`).
require_relative "../../spec_helper"

module EvixGCStress
  MODES = { "minor" => 0x01, "1" => 0x01, "full" => true }.freeze

  # Examples of other spec files whose assertions cannot hold under GC.stress
  # (matched against the full description): they measure elapsed time, or
  # they leave a pipe's other end unreferenced, which a GC then closes.
  # EVIX_GC_STRESS_SKIP adds comma-separated regexps.
  TIMING_EXAMPLES = [
    /fires timers in deadline order/,
    /lets many tasks sleep at the same time/,
    /runs every block posted by 4 threads x 2000/,
    /echoes over 200 concurrent connections/,
    /runs 100 fibers that each sleep 0\.05 s concurrently/,
    /lets an exception raised into its thread \(Timeout, Thread#raise\) out/,
    # Its 20 ms timer can be due before the loop's second iteration.
    /still runs timers while a next_tick keeps requeueing itself/,
    # Orders fibers by 20 and 40 ms sleeps; starting the second can take longer.
    /interleaves fibers at their sleeps/,
    # Elapsed-time bounds of 0.05-0.6 s, each missed under stress on a slow machine.
    /joins a thread from a fiber while other fibers keep running/,
    /wakes a fiber blocked on a Mutex promptly when the owning thread unlocks it/,
    /wakes the reader with IOError when another fiber closes it/,
    /raises Evix::TimeoutError from a write that cannot finish in time/
  ].freeze

  def self.skipped
    TIMING_EXAMPLES + ENV.fetch("EVIX_GC_STRESS_SKIP", "").split(",").map { |pattern| Regexp.new(pattern) }
  end

  def self.mode
    value = ENV.fetch("EVIX_GC_STRESS", "")
    return nil if value.empty? || value == "0"

    MODES.fetch(value) { raise ArgumentError, "EVIX_GC_STRESS must be minor or full (got #{value.inspect})" }
  end

  def self.timing?(full_description)
    skipped.any? { |pattern| pattern.match?(full_description) }
  end
end

if (stress = EvixGCStress.mode)
  RSpec.configure do |config|
    config.filter_run_excluding(timing: true)
    config.filter_run_excluding(full_description: ->(description) { EvixGCStress.timing?(description) })
    config.around do |example|
      GC.stress = stress
      example.run
    ensure
      GC.stress = false
    end
  end
end
