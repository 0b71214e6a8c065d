# frozen_string_literal: true

# One fiber workload in a fresh process (so peak RSS compares), printing one
# JSON line:
#
#   ruby bench/workloads/fibers.rb evix_scheduler|evix_spawn|async COUNT [SLEEPS]
#
# Spawns COUNT fibers that each park at once (Fiber.yield), so all of them are
# alive together; then resumes them all and each does SLEEPS x `sleep 0.01`
# through its library. Reports the spawn time (until every fiber is parked),
# the wall time from the release to the last fiber's end (ideal: SLEEPS x
# 10 ms), peak RSS (VmHWM), and what one parked fiber costs: RSS and Ruby
# objects per fiber between the start and the moment all are parked.

require "json"

DELAY = 0.01

impl, count, sleeps = ARGV
COUNT = Integer(count || 10_000)
SLEEPS = Integer(sleeps || 10)

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def status_kib(field)
  Integer(File.read("/proc/self/status")[/^#{field}:\s+(\d+) kB/, 1])
end

# Marks the moment every fiber is parked and what it cost so far.
class Probe
  attr_reader :marks

  def initialize
    @marks = { rss_start_kib: status_kib("VmRSS"), objects_start: GC.stat(:total_allocated_objects) }
    @marks[:start] = now
  end

  def parked
    @marks[:parked] = now
    @marks[:rss_parked_kib] = status_kib("VmRSS")
    @marks[:objects_parked] = GC.stat(:total_allocated_objects)
  end

  def done
    @marks[:done] = now
  end
end

# Plain Fiber.schedule + Kernel#sleep under evix's Fiber::Scheduler (Evix.run).
def evix_scheduler(probe, done)
  Evix.run do
    evloop = Fiber.scheduler.loop
    parked = []
    COUNT.times do
      Fiber.schedule do
        evloop.suspend { |token| parked << token }
        SLEEPS.times { sleep DELAY }
        done << 1
      end
    end
    probe.parked
    parked.each { |token| evloop.resume(token) }
  end
end

# evix's own tasks: Loop#spawn + Loop#sleep.
def evix_spawn(probe, done)
  evloop = Evix::Loop.new
  parked = []
  COUNT.times do
    evloop.spawn do
      evloop.suspend { |token| parked << token }
      SLEEPS.times { evloop.sleep(DELAY) }
      done << 1
    end
  end
  # Tasks start on the loop's first tick, in order: this runs after them all.
  evloop.next_tick do
    probe.parked
    parked.each { |token| evloop.resume(token) }
  end
  evloop.run
ensure
  evloop&.close
end

# async 1.30: tasks of the reactor; Kernel#sleep goes through the Fiber
# scheduler it sets (Reactor#block, a Timers::Group timer).
def async(probe, done)
  Async do |task|
    fibers = Array.new(COUNT) do
      task.async do
        Fiber.yield
        SLEEPS.times { sleep DELAY }
        done << 1
      end.fiber
    end
    probe.parked
    fibers.each(&:resume)
  end
end

case impl
when "evix_scheduler", "evix_spawn" then require "evix"
when "async"
  require "async"
  Console.logger.off!
else abort "usage: #{$PROGRAM_NAME} evix_scheduler|evix_spawn|async COUNT [SLEEPS]"
end

GC.start
done = []
probe = Probe.new
send(impl, probe, done)
probe.done
abort "#{impl}: #{done.size} of #{COUNT} fibers finished" unless done.size == COUNT

marks = probe.marks
puts JSON.generate(
  impl: impl, fibers: COUNT, sleeps: SLEEPS,
  spawn_s: marks[:parked] - marks[:start], wall_s: marks[:done] - marks[:parked],
  ideal_s: SLEEPS * DELAY, hwm_kib: status_kib("VmHWM"), rss_start_kib: marks[:rss_start_kib],
  rss_per_fiber_kib: (marks[:rss_parked_kib] - marks[:rss_start_kib]).fdiv(COUNT),
  objects_per_fiber: (marks[:objects_parked] - marks[:objects_start]).fdiv(COUNT)
)
