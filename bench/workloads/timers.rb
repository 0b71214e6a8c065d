# frozen_string_literal: true

# One timer workload in a fresh process, printing one JSON line:
#
#   ruby bench/workloads/timers.rb evix|timers_group COUNT
#
# Schedules COUNT one-shot timers with random delays in [0, 50 ms) (the same
# delays for every implementation), runs until they have all fired, and
# reports the scheduling time, when the last one fired and how late the timers
# fired. A timer is due at max(its deadline, the end of scheduling): nothing can
# fire while the process is still scheduling, so lateness measures the loop,
# not the scheduling (which has its own column). A timer's deadline is its
# delay after the moment it was scheduled, interpolated linearly between the
# start and the end of scheduling (timing each call would distort the figure).

require "json"

impl, count = ARGV
count = Integer(count || 100_000)
DELAYS = Random.new(42).then { |r| Array.new(count) { r.rand * 0.05 } }.freeze

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# @return [Array(Float, Float, Array<Float>)] scheduling start and end, and
#   the time each timer fired
def evix(delays)
  evloop = Evix::Loop.new
  fired = Array.new(delays.size)
  started = now
  delays.each_with_index { |delay, i| evloop.add_timer(delay) { fired[i] = now } }
  scheduled = now
  evloop.run
  [started, scheduled, fired]
ensure
  evloop&.close
end

def timers_group(delays)
  group = Timers::Group.new
  fired = Array.new(delays.size)
  started = now
  delays.each_with_index { |delay, i| group.after(delay) { fired[i] = now } }
  scheduled = now
  group.wait until group.empty?
  [started, scheduled, fired]
end

def percentile(sorted, pct)
  sorted[((pct / 100.0) * sorted.size).ceil.clamp(1, sorted.size) - 1]
end

case impl
when "evix" then require "evix"
when "timers_group" then require "timers"
else abort "usage: #{$PROGRAM_NAME} evix|timers_group COUNT"
end

send(impl, DELAYS.first([count / 10, 1].max)) # warm-up
GC.start
started, scheduled, fired = send(impl, DELAYS)
abort "#{impl}: #{fired.count(nil)} timers did not fire" if fired.include?(nil)

span = scheduled - started
due = DELAYS.each_with_index.map { |delay, i| [started + (span * (i + 1) / count) + delay, scheduled].max }
lateness = fired.zip(due).map { |at, due_at| at - due_at }.sort
last = due.each_index.max_by { |i| due[i] }
puts JSON.generate(
  impl: impl, timers: count, schedule_s: span,
  last_fired_s: fired.max - scheduled,         # from the end of scheduling
  last_lateness_s: fired[last] - due[last],    # the timer due last
  lateness_p50_s: percentile(lateness, 50), lateness_p99_s: percentile(lateness, 99),
  lateness_max_s: lateness.last
)
