# frozen_string_literal: true

require "rbconfig"

# rake soak — not part of the default task (it takes minutes): bench/soak.rb
# runs the evix fiber echo server in a child process under
# EVIX_SOAK_CONNECTIONS (10,000) connections for EVIX_SOAK_DURATION (60) s
# with random message sizes, checks every byte, samples the server's RSS and
# fd count every second and fails unless both stay flat after warm-up. See
# the top of bench/soak.rb for every variable.
desc "Soak test: 10,000 echo connections for 60 s, RSS and fds flat (EVIX_SOAK_CONNECTIONS, EVIX_SOAK_DURATION, ...)"
task soak: :compile do
  ruby "bench/soak.rb"
end

namespace :soak do
  desc "The core's property test with many cases (EVIX_PROPTEST_CASES, default 5,000)"
  task :proptest do
    cases = ENV.fetch("EVIX_PROPTEST_CASES", "5000")
    sh({ "EVIX_PROPTEST_CASES" => cases }, "cargo", "test", "--release", "--locked", "-p", "evix",
       "--no-default-features", "model")
  end
end

task soak: "soak:proptest"

namespace :soak do
  desc "Fuzz tasks, primitives and the nursery against a model for EVIX_FUZZ_SECONDS (60); prints each failing seed"
  task primitives: :compile do
    ruby "-Ilib", "spec/support/primitives_fuzzer.rb"
  end
end

task soak: "soak:primitives"
