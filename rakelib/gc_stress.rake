# frozen_string_literal: true

require "rbconfig"

# rake spec:gc_stress — the loop, scheduler and IO specs plus spec/reliability
# with GC.stress on inside every example (spec/reliability/support/gc_stress.rb
# turns EVIX_GC_STRESS into an around hook).
#
#   EVIX_GC_STRESS=minor (or 1; the default here): a minor GC at every
#     allocation. Old wb_protected objects (timers, watchers) are then
#     re-marked only through write barriers, and the loop (not wb_protected)
#     only through its mark function, so a missing barrier or mark frees a
#     live block at once. Examples tagged `timing: true` (their assertions
#     depend on elapsed time) are left out: ~750 examples, 15-20 minutes on a
#     2-core VM.
#   EVIX_GC_STRESS=full: a full GC at every allocation; about 100 times slower,
#     so only for the small set EVIX_GC_STRESS_FILES names.
#
# EVIX_GC_STRESS_FILES overrides the file list (space-separated paths or globs).
module EvixGCStressTask
  FILES = %w[
    spec/evix/loop/loop_spec.rb spec/evix/loop/timer_spec.rb spec/evix/loop/watcher_spec.rb
    spec/evix/loop/wait_io_spec.rb
    spec/evix/io/io_spec.rb spec/evix/io/io_lines_spec.rb spec/evix/loop/task_spec.rb spec/evix/scheduler/run_spec.rb
    spec/evix/scheduler/io_spec.rb spec/evix/scheduler/sleep_block_spec.rb
    spec/evix/scheduler/process_resolve_spec.rb spec/evix/scheduler/lifecycle_spec.rb
    spec/evix/scheduler/pipes_files_spec.rb
    spec/evix/loop/offload_spec.rb spec/evix/loop/signals_spec.rb spec/evix/threads_spec.rb spec/evix/gc_spec.rb
    spec/reliability
  ].freeze

  def self.files
    patterns = ENV.fetch("EVIX_GC_STRESS_FILES", "").split
    patterns = FILES if patterns.empty?
    patterns.flat_map { |pattern| Dir.glob(pattern) }.uniq
  end
end

namespace :spec do
  desc "The loop, scheduler, IO and reliability specs with GC.stress on in every example " \
       "(EVIX_GC_STRESS=minor|full, EVIX_GC_STRESS_FILES)"
  task gc_stress: :compile do
    env = {
      "EVIX_GC_STRESS" => ENV.fetch("EVIX_GC_STRESS", "minor"),
      # Per-example guard of spec_helper: everything is slower under stress.
      "EVIX_SPEC_TIMEOUT" => ENV.fetch("EVIX_SPEC_TIMEOUT", "300")
    }
    sh env, RbConfig.ruby, "-S", "rspec", "-r", "./spec/reliability/support/gc_stress.rb",
       "--format", "progress", *EvixGCStressTask.files
  end
end
