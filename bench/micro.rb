# frozen_string_literal: true

# Micro-benchmarks of the evix core against Ruby peers (run by `rake bench`, or
# `ruby -Ilib bench/micro.rb`). Every implementation runs in this one process: one warm-up,
# then the best of REPS repetitions. Prints one Markdown table and writes the same report to
# bench/RESULTS-micro.md (EVIX_BENCH_OUT overrides the path).
#
# EVIX_BENCH_SCALE (Float, default 1.0) scales every count, e.g. 0.01 for a smoke run.

require "etc"
require "evix"

Thread.abort_on_exception = true # a failing poster thread must fail the run, not hang it

SCALE = Float(ENV.fetch("EVIX_BENCH_SCALE", "1.0"))
OUT = ENV.fetch("EVIX_BENCH_OUT", File.join(__dir__, "RESULTS-micro.md"))
REPS = 3
TIMERS = [(100_000 * SCALE).round, 1].max
IMMEDIATES = [(1_000_000 * SCALE).round, 1].max
POSTS = [(100_000 * SCALE).round, 1].max
LINES = [(100_000 * SCALE).round, 1].max
# The same random delays (0..50 ms) for every implementation, drawn outside the timed code.
DELAYS = Random.new(42).then { |r| Array.new(TIMERS) { r.rand * 0.05 } }.freeze

def peer_version(lib, const)
  require lib
  Object.const_get(const)
rescue LoadError => e
  warn "bench: #{e.message}"
end

VERSIONS = {
  "evix" => Evix::VERSION,
  "timers" => peer_version("timers", "Timers::VERSION"),
  "async" => peer_version("async", "Async::VERSION"),
  "nio4r" => peer_version("nio", "NIO::VERSION")
}.compact.freeze
TIMERS_ROW = "Timers::Group (timers #{VERSIONS["timers"]}, async 1.30's timer queue)".freeze
NIO_ROW = "NIO::Selector#wakeup (nio4r #{VERSIONS["nio4r"]})".freeze
@nio_selects = [] # select calls that returned per nio4r run, for the notes

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def cpu
  Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
end

def expect(what, got, want)
  raise "#{what}: expected #{want}, got #{got}" unless got == want
end

def fmt(num)
  num.round.to_s.gsub(/(\d)(?=(\d{3})+\z)/, "\\1,")
end

# --- 1. timers scheduled, then fired -------------------------------------------------------

def evix_timers_fire
  ev = Evix::Loop.new
  fired = 0
  t0 = now
  DELAYS.each { |d| ev.add_timer(d) { fired += 1 } }
  t1 = now
  ev.run
  t2 = now
  expect("evix timers fired", fired, TIMERS)
  { "schedule" => t1 - t0, "schedule + fire (total)" => t2 - t0 }
ensure
  ev&.close
end

def timers_group_fire
  group = Timers::Group.new
  fired = 0
  t0 = now
  DELAYS.each { |d| group.after(d) { fired += 1 } }
  t1 = now
  group.wait until group.empty?
  t2 = now
  expect("Timers::Group timers fired", fired, TIMERS)
  { "schedule" => t1 - t0, "schedule + fire (total)" => t2 - t0 }
end

# --- 2. timers scheduled, then cancelled ---------------------------------------------------

def evix_timers_cancel
  ev = Evix::Loop.new
  t0 = now
  DELAYS.map { |d| ev.add_timer(d) { raise "cancelled timer fired" } }.each(&:cancel)
  ev.run # nothing referenced is left: returns at once (pays for any lazy cleanup)
  { "schedule + cancel" => now - t0 }
ensure
  ev&.close
end

def timers_group_cancel
  group = Timers::Group.new
  t0 = now
  DELAYS.map { |d| group.after(d) { raise "cancelled timer fired" } }.each(&:cancel)
  expect("Timers::Group#wait_interval", group.wait_interval, nil) # drops the cancelled handles
  { "schedule + cancel" => now - t0 }
end

# --- 3. immediates --------------------------------------------------------------------------

def evix_immediates
  ev = Evix::Loop.new
  ran = 0
  t0 = now
  IMMEDIATES.times { ev.next_tick { ran += 1 } }
  ev.run
  t1 = now
  expect("evix immediates run", ran, IMMEDIATES)
  { "queue + run" => t1 - t0 }
ensure
  ev&.close
end

def array_immediates
  queue = []
  ran = 0
  t0 = now
  IMMEDIATES.times { queue << proc { ran += 1 } }
  while (job = queue.shift)
    job.call
  end
  t1 = now
  expect("Array immediates run", ran, IMMEDIATES)
  { "queue + run" => t1 - t0 }
end

# --- 4. cross-thread posts ------------------------------------------------------------------

def evix_posts
  ev = Evix::Loop.new
  keepalive = ev.add_timer(60) {} # posts alone do not keep `run` alive; 60 s bounds a hang
  ran = 0
  t0 = now
  poster = Thread.new { POSTS.times { ev.post { ev.stop if (ran += 1) == POSTS } } }
  ev.run
  t1 = now
  poster.join
  keepalive.cancel
  expect("evix posts run", ran, POSTS)
  { "post + run" => t1 - t0 }
ensure
  ev&.close
end

def thread_queue_posts
  queue = Thread::Queue.new
  ran = 0
  t0 = now
  poster = Thread.new { POSTS.times { queue << proc { ran += 1 } } }
  queue.pop.call while ran < POSTS
  t1 = now
  poster.join
  expect("Thread::Queue posts run", ran, POSTS)
  { "post + run" => t1 - t0 }
end

def nio_wakeups
  selector = NIO::Selector.new
  done = false
  selects = 0
  t0 = now
  poster = Thread.new do
    POSTS.times { selector.wakeup }
    done = true
    selector.wakeup # sticky until the next select, so the loop below always sees `done`
  end
  until done
    selector.select
    selects += 1
  end
  t1 = now
  poster.join
  @nio_selects << selects
  { "post + run" => t1 - t0 }
ensure
  selector&.close
end

# --- 5. lines read from bulk input --------------------------------------------------------

# LINES request-like lines, all written at once by a child process into one end of a
# socketpair; the other end is read line by line until end of file. Timed in CPU time of
# this process: the cost of the reading, not how the scheduler runs the writer.
LINE_DATA = Array.new(LINES) { |i| "GET /items/#{i} HTTP/1.1 some header text\r\n" }.join.b.freeze

def line_source
  reader, writer = Socket.pair(:UNIX, :STREAM)
  pid = fork do
    reader.close
    writer.write(LINE_DATA)
    exit!(0)
  end
  writer.close
  [reader, pid]
end

def evix_gets
  socket, pid = line_source
  ev = Evix::Loop.new
  io = ev.wrap(socket)
  lines, secs = ev.spawn do
    read = 0
    t0 = cpu
    read += 1 while io.gets
    [read, cpu - t0]
  end.wait
  expect("Evix::IO#gets lines", lines, LINES)
  { "read line by line" => secs }
ensure
  io&.close
  ev&.close
  Process.wait(pid) if pid
end

def stdlib_gets
  socket, pid = line_source
  read = 0
  t0 = cpu
  read += 1 while socket.gets
  t1 = cpu
  expect("IO#gets lines", read, LINES)
  { "read line by line" => t1 - t0 }
ensure
  socket&.close
  Process.wait(pid) if pid
end

# --- driver ---------------------------------------------------------------------------------

WORKLOADS = [
  ["#{fmt TIMERS} timers (0-50 ms)", TIMERS,
   { "evix" => :evix_timers_fire, TIMERS_ROW => :timers_group_fire }],
  ["#{fmt TIMERS} timers", TIMERS,
   { "evix" => :evix_timers_cancel, TIMERS_ROW => :timers_group_cancel }],
  ["#{fmt IMMEDIATES} immediates", IMMEDIATES,
   { "evix" => :evix_immediates, "plain Ruby Array of procs (baseline)" => :array_immediates }],
  ["#{fmt POSTS} cross-thread posts", POSTS,
   { "evix" => :evix_posts, NIO_ROW => :nio_wakeups,
     "Thread::Queue push/pop of procs (baseline)" => :thread_queue_posts }],
  ["#{fmt LINES} buffered lines", LINES,
   { "evix" => :evix_gets, "stdlib IO#gets on the socket (baseline)" => :stdlib_gets }]
].freeze

PEER_LIB = { TIMERS_ROW => "timers", NIO_ROW => "nio4r" }.freeze

# One warm-up, then REPS timed runs; the minimum of each measured phase.
def best(meth)
  send(meth)
  runs = Array.new(REPS) do
    GC.start
    send(meth)
  end
  runs.reduce { |a, b| a.merge(b) { |_, x, y| [x, y].min } }
end

rows = [] # [workload, implementation, seconds, ops]
WORKLOADS.each do |title, ops, impls|
  impls.each do |impl, meth|
    next if PEER_LIB.key?(impl) && !VERSIONS.key?(PEER_LIB[impl])

    best(meth).each { |phase, secs| rows << ["#{title}: #{phase}", impl, secs, ops] }
  end
end

table = ["| Workload | Implementation | Time (ms) | ops/s | Ratio vs evix |", "|---|---|--:|--:|--:|"]
rows.group_by(&:first).each do |workload, group|
  evix = group.find { |row| row[1] == "evix" }[2]
  group.each do |_, impl, secs, ops|
    cells = [workload, impl, format("%.1f", secs * 1000), fmt(ops / secs), format("%.2f", secs / evix)]
    table << "| #{cells.join(" | ")} |"
  end
end

cpu = File.exist?("/proc/cpuinfo") && File.foreach("/proc/cpuinfo").find { |l| l.start_with?("model name") }
backend = Evix::Loop.new.then { |ev| ev.backend.tap { ev.close } }
notes = [
  "Ratio = implementation time / evix time for the same workload: > 1 means evix is faster.",
  "Timers: every implementation gets the same #{fmt TIMERS} random delays in 0-50 ms, so the " \
  "total includes up to 50 ms of waiting. Timers::Group is the timer queue of async 1.30's " \
  "reactor (async has no public timer API of its own).",
  "Cancel: schedule all, cancel all, then let the loop see it is empty (evix `run`; " \
  "Timers::Group `wait_interval`, which drops the cancelled handles).",
  "Immediates: async 1.30 has no next_tick; the baseline pushes procs onto an Array and " \
  "drains it with shift + call.",
  "Cross-thread posts: from starting the poster thread until the loop thread has run the last " \
  "posted block (evix keeps the loop alive with a long timer and calls `stop` in the last block).",
  "Buffered lines: a child process writes #{fmt LINES} lines of 44 bytes at once into a UNIX " \
  "socketpair; `Evix::IO#gets` in a task and stdlib `IO#gets` on the plain socket each read " \
  "them all, line by line, until end of file. Timed in CPU time of the reading process " \
  "(CLOCK_PROCESS_CPUTIME_ID), not wall time, so the writer's scheduling is left out."
]
(%w[timers async nio4r] - VERSIONS.keys).each { |gem| notes << "#{gem} is not installed: its rows are skipped." }
unless @nio_selects.empty?
  notes << "nio4r has no post: its row times #{fmt POSTS} `NIO::Selector#wakeup` calls from the " \
           "poster thread until the selector thread returns from `select` after the last one. " \
           "Wake-ups coalesce (`select` returns per run: #{@nio_selects.minmax.uniq.join("-")}) " \
           "and no callback runs, so it is a lower bound, not an equivalent."
end

report = <<~MD
  # evix micro-benchmarks

  - Date: #{Time.now.utc.strftime("%Y-%m-%d %H:%M UTC")}
  - `ruby -v`: #{RUBY_DESCRIPTION}
  - `uname -m`: #{Etc.uname[:machine]}
  - CPU: #{cpu ? cpu.split(":", 2).last.strip : "unknown"} (#{Etc.nprocessors} online)
  - Versions: #{VERSIONS.map { |name, v| "#{name} #{v}" }.join(", ")}; evix backend: #{backend}
  - EVIX_BENCH_SCALE=#{SCALE}; best of #{REPS} runs after 1 warm-up; CLOCK_MONOTONIC (buffered lines: CPU time).

  #{table.join("\n")}

  #{notes.map { |n| "- #{n}" }.join("\n")}
MD

puts report
File.write(OUT, report)
warn "wrote #{OUT}"
