# frozen_string_literal: true

require_relative "evix_build"

# bench/loadgen is a Cargo workspace of its own (the gem ships the root
# Cargo.toml but not bench/, and cargo rejects a workspace with a missing
# member), so the root's cargo tasks would not see it: lint it here too.
BENCH_MANIFEST = File.join(EvixBuild::ROOT, "bench", "loadgen", "Cargo.toml")

desc "Run the benchmarks: bench/run.rb (servers, timers, fibers; runs bench/micro.rb too) and write " \
     "bench/RESULTS.md. EVIX_BENCH_QUICK=1 for a tiny run (report in tmp/bench-quick/)"
task :bench do
  # Invoked here rather than as a prerequisite so it works whatever order rakelib/ loads in.
  Rake::Task[:compile].invoke if Rake::Task.task_defined?(:compile)
  # The peers are Debian's gems, which the bundle does not list: run outside Bundler.
  EvixBuild.unbundled { ruby "bench/run.rb" }
end

namespace :bench do
  desc "Run only the in-process micro-benchmarks (bench/micro.rb); writes bench/RESULTS-micro.md"
  task :micro do
    Rake::Task[:compile].invoke if Rake::Task.task_defined?(:compile)
    EvixBuild.unbundled { ruby "-Ilib", "bench/micro.rb" }
  end
end

namespace :cargo do
  # These add an action to the tasks of rakelib/cargo.rake (rake merges tasks of one name).
  task :fmt do
    sh EvixBuild.cargo, "fmt", "--manifest-path", BENCH_MANIFEST, "--", "--check"
  end

  task :clippy do
    sh EvixBuild.cargo, "clippy", "--locked", "--manifest-path", BENCH_MANIFEST, "--all-targets", "--",
       "-D", "warnings"
  end

  task :test do
    sh EvixBuild.cargo, "test", "--locked", "--manifest-path", BENCH_MANIFEST
  end
end
