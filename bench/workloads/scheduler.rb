# frozen_string_literal: true

# One Fiber::Scheduler workload in a fresh process, printing one JSON line
# ({"wall_s": ..., "hwm_kib": ...}):
#
#   ruby bench/workloads/scheduler.rb threads|async|evix WORKLOAD [SCALE]
#
# The same blocking-style code runs in a thread per unit of work (threads), or
# in a fiber per unit under async's scheduler (`Async { Fiber.schedule }`) or
# evix's (`Evix.run { Fiber.schedule }`). SCALE (default 1.0) shrinks the
# counts for a quick run. Every workload checks what it moved, so a scheduler
# that loses or reorders data fails instead of finishing early.
#
#   pipes        50 pipe pairs, each moving 10,000 x 1 KiB from a writer to a reader
#   socketpairs  the same over UNIX socket pairs
#   mutex_file   50 groups of 10 workers taking a Mutex to append 1 KiB chunks to the group's file
#   queue        40 groups of 5 producers and 10 consumers on a Thread::Queue
#   sleep        10,000 workers x 10 `sleep 0.01`

require "json"
require "socket"
require "tmpdir"

impl, workload, scale = ARGV
SCALE = Float(scale || "1")
CHUNK = ("x" * 1024).b.freeze

def count(full)
  [(full * SCALE).round, 1].max
end

# Starts one unit of work the way +impl+ does; the runner waits for all.
class Runner
  def initialize(impl)
    @impl = impl
    @threads = []
  end

  def spawn(&)
    if @impl == "threads"
      @threads << Thread.new(&)
    else
      Fiber.schedule(&)
    end
  end

  # Runs +block+ (which spawns the work) and returns once all of it is done.
  def run(&block)
    case @impl
    when "threads" then block.call
                        @threads.each(&:join)
    when "async" then Async(&block).wait
    when "evix" then Evix.run(&block)
    else abort "usage: scheduler.rb threads|async|evix WORKLOAD [SCALE]"
    end
  end
end

# A writer and a reader per pair; the reader checks every byte count.
def stream_pairs(runner, pairs, &make_pair)
  messages = count(10_000)
  count(pairs).times do
    reader, writer = make_pair.call
    runner.spawn do
      messages.times { writer.write(CHUNK) }
      writer.close
    end
    runner.spawn do
      got = 0
      while (data = reader.read(CHUNK.bytesize))
        got += data.bytesize
      end
      raise "reader got #{got} bytes" unless got == messages * CHUNK.bytesize

      reader.close
    end
  end
end

def mutex_file(runner, dir)
  chunks = count(100)
  groups = count(50).times.map do |group|
    path = File.join(dir, "group-#{group}")
    [File.open(path, "wb"), Mutex.new, path]
  end
  groups.each do |file, mutex, _path|
    10.times do
      runner.spawn { chunks.times { mutex.synchronize { file.write(CHUNK) } } }
    end
  end
  groups
end

def check_files(groups)
  expected = 10 * count(100) * CHUNK.bytesize
  groups.each do |file, _mutex, path|
    file.close
    raise "#{path}: #{File.size(path)} bytes" unless File.size(path) == expected
  end
end

# Each producer ends with two :done, one for each of two consumers: ten in all.
def queue(runner)
  items = count(2_000)
  totals = Queue.new
  count(40).times do
    queue = Thread::Queue.new
    5.times { runner.spawn { items.times { |i| queue.push(i) } && 2.times { queue.push(:done) } } }
    10.times do
      runner.spawn do
        got = 0
        got += 1 until queue.pop == :done
        totals.push(got)
      end
    end
  end
  totals
end

def sleepers(runner)
  count(10_000).times { runner.spawn { 10.times { sleep 0.01 } } }
end

case impl
when "async" then require "async"
when "evix" then require "evix"
end

runner = Runner.new(impl)
result = nil
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
Dir.mktmpdir("evix-bench") do |dir|
  runner.run do
    result = case workload
             when "pipes" then stream_pairs(runner, 50) { IO.pipe }
             when "socketpairs" then stream_pairs(runner, 50) { UNIXSocket.pair }
             when "mutex_file" then mutex_file(runner, dir)
             when "queue" then queue(runner)
             when "sleep" then sleepers(runner)
             else abort "unknown workload #{workload.inspect}"
             end
  end
  check_files(result) if workload == "mutex_file"
end
wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
if workload == "queue"
  moved = Array.new(result.size) { result.pop }.sum
  raise "consumers got #{moved} items" unless moved == count(40) * 5 * count(2_000)
end
hwm = Integer(File.read("/proc/self/status")[/^VmHWM:\s+(\d+) kB/, 1])
puts JSON.generate(impl: impl, workload: workload, wall_s: wall.round(4), hwm_kib: hwm)
