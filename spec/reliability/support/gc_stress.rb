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
# Examples whose assertions depend on elapsed time or CPU cannot hold while
# every allocation collects the heap: they are tagged `timing: true`, and
# left out under stress. EVIX_GC_STRESS_SKIP leaves out more: comma-separated
# regexps matched against the full description. spec/reliability scales its
# big loops down under stress (`scaled`).
require_relative "../../spec_helper"

module EvixGCStress
  MODES = { "minor" => 0x01, "1" => 0x01, "full" => true }.freeze

  def self.mode
    value = ENV.fetch("EVIX_GC_STRESS", "")
    return nil if value.empty? || value == "0"

    MODES.fetch(value) { raise ArgumentError, "EVIX_GC_STRESS must be minor or full (got #{value.inspect})" }
  end

  # Whether EVIX_GC_STRESS_SKIP names the example.
  def self.skip?(full_description)
    ENV.fetch("EVIX_GC_STRESS_SKIP", "").split(",").any? { |pattern| Regexp.new(pattern).match?(full_description) }
  end
end

if (stress = EvixGCStress.mode)
  RSpec.configure do |config|
    config.filter_run_excluding(timing: true)
    config.filter_run_excluding(full_description: ->(description) { EvixGCStress.skip?(description) })
    config.around do |example|
      GC.stress = stress
      example.run
    ensure
      GC.stress = false
    end
  end
end
