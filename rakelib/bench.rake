# frozen_string_literal: true

require_relative "evix_build"

# bench/loadgen is a Cargo workspace of its own (the gem ships the root
# Cargo.toml but not bench/, and cargo rejects a workspace with a missing
# member), so the root's cargo tasks would not see it: lint it here too.
BENCH_MANIFEST = File.join(EvixBuild::ROOT, "bench", "loadgen", "Cargo.toml")

# The benchmark's lanes: Ruby 3.1 on this host (async 1.30's generation of
# peers) and Ruby 3.3 in the sid chroot of rakelib/compat.rake with today's
# (async 2, io-event, io-stream, nio4r 2.7, puma 8). Each writes its report
# under tmp/; bench:report puts them together into bench/RESULTS.md.
module BenchLanes
  extend FileUtils

  QUICK = ENV["EVIX_BENCH_QUICK"] == "1"
  DIR = File.join(EvixBuild::ROOT, "tmp", QUICK ? "bench-quick" : "bench")
  # What each lane measures unless EVIX_BENCH_ONLY says otherwise: the 3.3
  # lane what the targets against async 2 need, the 3.1 lane the rest (redis: the
  # host has redis-server, the chroot not).
  WORKLOADS = {
    "3.1" => "echo,http,idle,syscalls,redis,timers,fibers,micro",
    "3.3" => "echo,rate,maxrate,http,rack,scheduler"
  }.freeze
  CONNECTIONS = { "3.1" => "1,10,100,1000", "3.3" => "100,1000" }.freeze
  # Five rounds where the targets against async 2 are judged, three on the older lane.
  ROUNDS = { "3.1" => "3", "3.3" => "5" }.freeze

  module_function

  def out(version)
    File.join(DIR, "lane-#{version}.md")
  end

  # The lane's EVIX_BENCH_* settings: the caller's, else the lane's defaults.
  def env(version)
    settings = ENV.select { |key, _| key.start_with?("EVIX_BENCH_") }
    { "EVIX_BENCH_ONLY" => WORKLOADS.fetch(version), "EVIX_BENCH_CONNECTIONS" => CONNECTIONS.fetch(version),
      "EVIX_BENCH_ROUNDS" => ROUNDS.fetch(version) }.merge(settings)
  end

  # EVIX_BENCH_FALCON names source checkouts on the host (Falcon's first,
  # ":"-separated); the chroot sees each one at /peers/NAME. Returns the
  # mounts and the variable as the chroot must read it.
  def falcon_mounts
    checkouts = ENV.fetch("EVIX_BENCH_FALCON", "").split(":").reject(&:empty?).map { |dir| File.expand_path(dir) }
    mounts = checkouts.map { |dir| [dir, File.join("peers", File.basename(dir))] }
    [mounts, mounts.map { |_, inside| "/#{inside}" }.join(":")]
  end

  def loadgen!
    sh EvixBuild.cargo, "build", "--release", "--locked", "--quiet", "--manifest-path", BENCH_MANIFEST
  end
end

desc "Run the benchmarks on both lanes (Ruby 3.1 here; Ruby 3.3 with async 2, nio4r 2.7 and puma in a sid " \
     "chroot, root only) and write bench/RESULTS.md. EVIX_BENCH_QUICK=1 for a tiny run (tmp/bench-quick/)"
task bench: %w[bench:ruby31 bench:ruby33 bench:report]

namespace :bench do
  desc "The Ruby 3.1 lane (this host's Ruby): tmp/bench/lane-3.1.md"
  task :ruby31 do
    Rake::Task[:compile].invoke if Rake::Task.task_defined?(:compile)
    BenchLanes.loadgen!
    env = BenchLanes.env("3.1").merge("EVIX_BENCH_OUT" => BenchLanes.out("3.1"), "EVIX_BENCH_PREBUILT" => "1")
    # The peers are Debian's gems, which the bundle does not list: run outside Bundler.
    EvixBuild.unbundled { sh env, RbConfig.ruby, "bench/run.rb" }
  end

  desc "The Ruby 3.3 lane in the sid chroot (root only; builds it the first time): tmp/bench/lane-3.3.md"
  task :ruby33 do
    # The host builds the load generator: it runs in the chroot as it is.
    BenchLanes.loadgen!
    out = BenchLanes.out("3.3").sub(EvixBuild::ROOT, "/evix")
    revision = `git -C #{EvixBuild::ROOT} rev-parse --short HEAD`.strip
    env = BenchLanes.env("3.3").merge("EVIX_BENCH_OUT" => out, "EVIX_BENCH_PREBUILT" => "1",
                                      "EVIX_BENCH_REVISION" => "commit #{revision}")
    mounts, falcon = BenchLanes.falcon_mounts
    env["EVIX_BENCH_FALCON"] = falcon unless mounts.empty?
    Compat.run(Compat::BENCH, "ruby bench/run.rb", env: env, mounts: mounts)
  end

  desc "Put the lanes' reports together into bench/RESULTS.md (tmp/bench-quick/RESULTS.md when quick)"
  task :report do
    out = if BenchLanes::QUICK
            File.join(BenchLanes::DIR,
                      "RESULTS.md")
          else
            File.join(EvixBuild::ROOT, "bench", "RESULTS.md")
          end
    ruby "bench/report.rb", out, BenchLanes.out("3.3"), BenchLanes.out("3.1")
  end

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
