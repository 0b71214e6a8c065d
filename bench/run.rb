# frozen_string_literal: true

# The side-by-side benchmark of evix against its Ruby peers and a raw Rust
# ceiling. Run by `rake bench` (and `evix bench`), or directly:
#
#   ruby bench/run.rb
#
# Every server (bench/servers/*.rb, and the Rust ceiling from bench/loadgen)
# runs alone, pinned to CPU 0; the load generator and wrk run on CPU 1. Timer
# and fiber workloads run in fresh processes (bench/workloads/*.rb) so their
# peak RSS compares; bench/micro.rb adds the in-process micro-benchmarks
# (including 100,000 cross-thread wake-ups). The tables go to stdout and to
# bench/RESULTS.md with the machine, Ruby, kernel and peer versions, followed
# by the lane's targets evaluated on this run and bench/PROFILE.md (what
# bounds evix's figures).
#
# Environment:
#   EVIX_BENCH_QUICK=1     a tiny configuration (one short point per workload)
#                          that finishes in well under a minute; its report goes
#                          to tmp/bench-quick/ unless EVIX_BENCH_OUT says otherwise
#   EVIX_BENCH_OUT         where to write the report (default bench/RESULTS.md)
#   EVIX_BENCH_DURATION    seconds measured per echo/HTTP point (default 3)
#   EVIX_BENCH_ONLY        comma-separated workloads to run (default all):
#                          echo, http, idle, syscalls, timers, fibers, micro
#   EVIX_BENCH_SERVERS     comma-separated servers to run (default all)

require_relative "support/suite"

Bench::Suite.new(Bench::Config.from_env).run
