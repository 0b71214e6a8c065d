# frozen_string_literal: true

require "spec_helper"
require_relative "support/reliability_helpers"

# A short run of the primitives' and nursery's fuzzer (spec/support/
# primitives_fuzzer.rb); `rake soak:primitives` runs it for minutes with
# fresh seeds. EVIX_FUZZ_SEED=N sets the first seed (the failure names each).
RSpec.describe "Fuzzing tasks, primitives and the nursery against a model" do
  first_seed = Integer(ENV.fetch("EVIX_FUZZ_SEED", "20_261_203".delete("_")))

  3.times do |batch|
    seeds = (first_seed + (batch * 40))...(first_seed + ((batch + 1) * 40))
    it "holds the model for seeds #{seeds.first}..#{seeds.last}" do
      failures = in_child(timeout: 30) do
        # Under GC.stress (rake spec:gc_stress) a few seeds per batch.
        seeds.first(scaled(seeds.size, 2)).filter_map do |seed|
          fuzzer = EvixPrimitivesFuzzer.new(seed)
          violations = fuzzer.run
          "#{fuzzer}: #{violations.first(3).join("; ")}" unless violations.empty?
        end
      end
      expect(failures).to eq([]), "replay one with EVIX_FUZZ_SEED=<seed>: #{failures.inspect}"
    end
  end
end
