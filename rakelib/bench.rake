# frozen_string_literal: true

desc "Run the micro-benchmarks (EVIX_BENCH_SCALE=0.01 for a quick run); writes bench/RESULTS-micro.md"
task :bench do
  # Invoked here rather than as a prerequisite so it works whatever order rakelib/ loads in.
  Rake::Task[:compile].invoke if Rake::Task.task_defined?(:compile)
  ruby "-Ilib", "bench/micro.rb"
end
