# frozen_string_literal: true

# Helpers for spec/reliability only (on top of spec_helper's EvixSpecHelpers
# and spec/support/).
module ReliabilityHelpers
  # Whether rake spec:gc_stress runs this (GC.stress on: everything is far slower).
  def gc_stress?
    value = ENV.fetch("EVIX_GC_STRESS", "")
    !(value.empty? || value == "0")
  end

  # +count+, or +stressed+ under GC.stress, for loops whose size is not the point.
  def scaled(count, stressed)
    gc_stress? ? stressed : count
  end

  def cpu_time
    Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  end

  # Resident set size of +pid+ in KiB.
  def rss_kib(pid = Process.pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i
  end

  # Objects nothing but a closure references any more, spread over the heap
  # so that compaction has something to move.
  def churn(count = 5_000)
    Array.new(count) { |i| "churn-#{i}" }.each_slice(7).map(&:join)
    nil
  end

  # Runs the block in a forked child (EvixChildProcess#child_outcome) and
  # returns its value, or raises the child's exception with its backtrace.
  # (A named block: Ruby 3.1.2 cannot forward an anonymous one next to keywords.)
  def isolated(timeout: 8, &block)
    kind, *rest = child_outcome(timeout, &block)
    return rest.first if kind == :value

    raise RSpec::Expectations::ExpectationNotMetError,
          "isolated child raised #{rest[0]}: #{rest[1]}\n  #{Array(rest[2]).join("\n  ")}"
  end
end

RSpec.configure do |config|
  config.include ReliabilityHelpers, file_path: %r{spec/reliability/}
end
