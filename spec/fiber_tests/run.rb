# frozen_string_literal: true

# Runs Ruby's own Fiber::Scheduler tests (test/fiber of a Ruby source tree)
# with Ruby's own runner (tool/test/runner.rb), twice: against the reference
# `Scheduler` of test/fiber/scheduler.rb, and with that class swapped for
# Evix::Scheduler (spec/fiber_tests/evix_scheduler.rb). Prints one line per
# test with both outcomes, and exits 1 if evix fails a test the reference
# passes.
#
#   ruby spec/fiber_tests/run.rb RUBY_SOURCE_DIR
#
# `rake fiber_tests:*` (rakelib/fiber_tests.rake) fetches the source and runs
# this with the lane's Ruby. Each test file runs in its own process with a
# deadline (EVIX_FIBER_TESTS_DEADLINE seconds, default 60): a test that hangs
# is reported as "hang" and the rest of its file runs again without it.

require "fileutils"
require "io/wait"
require "rbconfig"
require "tmpdir"

module FiberTests
  HERE = __dir__
  EVIX_LIB = File.expand_path("../../lib", HERE)
  DEADLINE = Float(ENV.fetch("EVIX_FIBER_TESTS_DEADLINE", "60"))
  STARTED = %r{^\[\s*\d+/\d+\] (\w+#\w+[?!]?)}
  TIMED = / = [\d.]+ s$/
  FAILED = /^\s+\d+\) (Failure|Error|Skipped):\n(\w+#\w+[?!]?)/

  # The tests evix cannot pass on a given Ruby, each with the reason; the
  # run fails if one of them starts passing (the entry is then stale).
  #
  # test_mutex_deadlock on 3.1 and 3.3 parks a scheduled fiber with a bare
  # Fiber.yield and expects the thread's root fiber to go on. The reference
  # enters its fibers with Fiber#resume, so the yield returns there. evix
  # enters every fiber with Fiber#transfer (so that a wait inside a fiber a
  # task resumed itself still reaches the loop, as async does), and Ruby
  # raises FiberError for a Fiber.yield in a fiber entered by transfer: the
  # fiber fails, synchronize lets the Mutex go, and the root's lock does not
  # fail as the test expects. 3.4's version parks with the reference's
  # Scheduler#transfer instead, which evix passes (evix_scheduler.rb).
  FIBER_YIELD = "parks the scheduled fiber with a bare Fiber.yield, a FiberError in a fiber entered by " \
                "Fiber#transfer (see KNOWN in spec/fiber_tests/run.rb)"
  KNOWN = {
    "3.1" => { "TestFiberMutex#test_mutex_deadlock" => FIBER_YIELD },
    "3.3" => { "TestFiberMutex#test_mutex_deadlock" => FIBER_YIELD }
  }.freeze

  # Per column: { "Class#test" => the runner's report of its failure }
  DETAILS = { reference: {}, evix: {} }.freeze

  module_function

  def main(source)
    runner = File.join(source, "tool/test/runner.rb")
    abort "fiber_tests: no #{runner}" unless File.exist?(runner)
    Dir.mktmpdir("evix-fiber-tests") do |tmp|
      columns = { reference: copy_tests(source, tmp, :reference), evix: copy_tests(source, tmp, :evix) }
      results = columns.to_h { |name, dir| [name, Thread.new { run_column(source, dir, name) }] }
                       .transform_values(&:value)
      puts "test/fiber of #{File.basename(source)}"
      exit(report(results[:reference], results[:evix]))
    end
  end

  # A copy of test/fiber; for evix, scheduler.rb with the reference
  # Scheduler's body replaced by a require of evix_scheduler.rb, and
  # IOBufferScheduler's (whose io_read/io_write Evix::Scheduler has itself)
  # by nothing.
  def copy_tests(source, tmp, column)
    dir = File.join(tmp, column.to_s, "fiber")
    FileUtils.mkdir_p(File.dirname(dir))
    FileUtils.cp_r(File.join(source, "test/fiber"), dir)
    if column == :evix
      path = File.join(dir, "scheduler.rb")
      text = File.read(path)
      text = replace_class(text, "class Scheduler\n",
                           "require #{File.join(HERE, "evix_scheduler").dump}\n")
      text = replace_class(text, "class IOBufferScheduler < Scheduler\n",
                           "class IOBufferScheduler < Scheduler\nend\n")
      File.write(path, text)
    end
    dir
  end

  # Replaces the class that starts at +opening+ (up to the first "end" at
  # the start of a line) with +replacement+.
  def replace_class(text, opening, replacement)
    start = text.index(opening) or abort "fiber_tests: no #{opening.strip} in scheduler.rb"
    finish = text.index(/^end\n/, start) or abort "fiber_tests: #{opening.strip} has no end"
    text[0...start] + replacement + text[(finish + 4)..]
  end

  def run_column(source, dir, column)
    Dir[File.join(dir, "test_*.rb")].each_with_object({}) do |file, results|
      results.merge!(run_file(source, file, column))
    end
  end

  # Runs one test file; after a hang, runs it again without the tests that
  # hung, until it finishes.
  def run_file(source, file, column, skip = [])
    output, finished = spawn_runner(source, file, column, skip)
    DETAILS[column].merge!(details(output))
    results = parse(output)
    return results if finished

    hung = results.select { |_, outcome| outcome == :running }.keys
    return results.merge(file_hang(file) => :hang) if hung.empty?

    hung.each { |name| results[name] = :hang }
    results.merge(run_file(source, file, column, skip + hung.map { |name| name.split("#").last })) do |_, a, b|
      a == :hang ? a : b
    end
  end

  def file_hang(file)
    "#{File.basename(file)} (whole file)"
  end

  def spawn_runner(source, file, column, skip)
    command = [RbConfig.ruby]
    command += ["-I", EVIX_LIB] if column == :evix
    command += [File.join(source, "tool/test/runner.rb"), "-v", "--tty=no", "--show-skip"]
    command += ["-n", "/\\A(?!(?:\\w+#)?(?:#{skip.join("|")})\\z)/"] unless skip.empty?
    command << file
    read, write = IO.pipe
    # The runner's report is on stdout; what the tests and evix print on
    # stderr would break its lines.
    pid = Process.spawn(*command, chdir: source, out: write, err: File::NULL, pgroup: true)
    write.close
    output = +""
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + DEADLINE
    finished = collect(read, output, deadline)
    Process.kill(:KILL, -pid) unless finished
    Process.wait(pid)
    [output, finished]
  ensure
    read&.close
  end

  def collect(read, output, deadline)
    while (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)).positive?
      return false unless read.wait_readable(left)

      chunk = read.read_nonblock(65_536, exception: false)
      return true if chunk.nil?

      output << chunk unless chunk == :wait_readable
    end
    false
  end

  # { "Class#test" => :pass / :fail / :error / :skip / :running }
  def parse(output)
    results = {}
    current = nil
    output.each_line do |line|
      if (match = STARTED.match(line))
        results[current = match[1]] = :running
      end
      # The time may come lines later, after what the test printed.
      results[current] = :pass if current && TIMED.match?(line.chomp)
    end
    output.scan(FAILED) { |kind, name| results[name] = kind.downcase.to_sym.then { |k| k == :failure ? :fail : k } }
    results
  end

  # { "Class#test" => the runner's report of its failure or error }
  def details(output)
    output.split(/^(?=\s+\d+\) (?:Failure|Error|Skipped):\n)|^(?=Finished tests)/).to_h do |section|
      [section[FAILED, 2], section.strip]
    end
  end

  def report(reference, evix)
    puts "Ruby #{RUBY_VERSION}: test/fiber, reference Scheduler vs Evix::Scheduler"
    bad = compare(reference, evix, KNOWN.fetch(RUBY_VERSION[/\A\d+\.\d+/], {}))
    puts "reference passes #{passes(reference)} of #{reference.size}; evix #{passes(evix)} of #{evix.size}"
    return 0 if bad.empty?

    bad.each { |name| puts "", "#{name} under evix:", DETAILS[:evix].fetch(name, "(no report)").lines.first(25) }
    puts "", "evix differs from the reference on: #{bad.join(", ")}"
    1
  end

  # Prints one line per test; returns the tests where evix falls short.
  def compare(reference, evix, known)
    names = (reference.keys | evix.keys).sort
    width = names.map(&:size).max || 0
    names.reject do |name|
      outcomes = [reference.fetch(name, :missing), evix.fetch(name, :missing)]
      ok, note = judge(*outcomes, known[name])
      puts format("  %-#{width}s  %-8s %-8s%s", name, *outcomes, note)
      ok
    end
  end

  # [whether the pair of outcomes is fine, a note]: evix must pass what the
  # reference passes, unless the test is known (and then it must not pass).
  def judge(reference, evix, known)
    if reference == :pass && evix != :pass
      known ? [true, "  (known: #{known})"] : [false, ""]
    elsif known
      [false, "  (listed as known, but the reference does not pass or evix does)"]
    else
      [true, ""]
    end
  end

  def passes(results)
    results.count { |_, outcome| outcome == :pass }
  end
end

FiberTests.main(File.expand_path(ARGV.fetch(0))) if $PROGRAM_NAME == __FILE__
