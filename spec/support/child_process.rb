# frozen_string_literal: true

require "io/wait"
require "open3"
require "rbconfig"
require "tempfile"

# Runs code that may hang or kill the process somewhere it cannot hang or kill
# the suite: a forked child, or a fresh Ruby, each with a deadline.
module EvixChildProcess
  # Runs the block in a forked child and returns its value (Marshal-able), or
  # [:error, class name, message] if it raised. Raises if the child hung for
  # +timeout+ seconds (it is killed) or died without a result.
  def in_child(timeout: 5, &block)
    kind, *rest = child_outcome(timeout, &block)
    kind == :value ? rest.first : [:error, rest[0], rest[1]]
  end

  # The one fork-and-report of the suite: runs the block in a forked child
  # whose stderr goes to a temporary file, and returns [:value, its value] or
  # [:error, class name, message, backtrace head]. The child leaves with
  # exit! (no at_exit hooks, no RSpec). A child that hangs past +timeout+
  # seconds is killed; one that gives no outcome (a crash: a segfault or an
  # abort, not an exception) fails the example with its status and the head
  # of its stderr instead of taking the suite down. Under GC.stress, which
  # the child inherits, it gets 20 times +timeout+.
  def child_outcome(timeout, &)
    timeout *= 20 if GC.stress
    reader, writer = IO.pipe
    stderr = Tempfile.new("evix-child")
    pid = fork { report_outcome(reader, writer, stderr.path, &) }
    (@evix_children ||= []) << pid # killed after the example if the deadline ends it first
    writer.close
    data = read_until_eof(reader, timeout)
    status = wait_child(pid, timeout: 1)
    if status.signaled? || !status.success? || data.empty?
      raise RSpec::Expectations::ExpectationNotMetError,
            "the child hung for #{timeout}s or died (#{status.inspect}); its stderr began:\n" \
            "#{File.read(stderr.path)[0, 1500]}"
    end
    Marshal.load(data) # rubocop:disable Security/MarshalLoad -- our own child's data
  ensure
    reader&.close
    writer&.close unless writer&.closed?
    stderr&.close!
  end

  # Forks a child that runs the block with a +report+ lambda (one line to the
  # parent per call) and leaves with exit! (0, or 1 if the block raised; its
  # stderr goes nowhere unless EVIX_SPEC_CHILD_STDERR is set). Returns
  # [pid, reader]: #child_line reads the reported lines; the after hook kills
  # the child if it still runs.
  def fork_child
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      report = lambda do |line|
        writer.write("#{line}\n")
        writer.flush
      end
      code = 0
      begin
        $stderr = File.open(File::NULL, "w") unless ENV["EVIX_SPEC_CHILD_STDERR"]
        yield report
      rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
        report.call("child failed: #{e.class}: #{e.message} #{e.backtrace&.first(3)&.join(" | ")}")
        code = 1
      ensure
        exit!(code)
      end
    end
    writer.close
    track_io(reader)
    (@evix_children ||= []) << pid
    [pid, reader]
  end

  # The next line a #fork_child child reported, or a failure after +timeout+.
  def child_line(reader, timeout: 5)
    raise RSpec::Expectations::ExpectationNotMetError, "the child reported nothing within #{timeout}s" \
      unless reader.wait_readable(timeout)

    line = reader.gets
    raise RSpec::Expectations::ExpectationNotMetError, "the child closed its report pipe" unless line
    raise RSpec::Expectations::ExpectationNotMetError, line.chomp if line.start_with?("child failed:")

    line.chomp
  end

  # [:value, what the block returned] or [:raised, class name, message]: an
  # outcome a child can send back with Marshal.
  def capture
    [:value, yield]
  rescue Exception => e # rubocop:disable Lint/RescueException -- reported as data
    [:raised, e.class.name, e.message]
  end

  # Runs the block inside Evix.run, in a forked child, on +backend+'s loop.
  def evix_run_in_child(backend = nil, timeout: 5, &block)
    in_child(timeout: timeout) do
      ENV["EVIX_BACKEND"] = backend.to_s if backend
      Evix.run(&block)
    end
  end

  # The lines a #run_ruby child printed, without their newlines.
  def lines(run)
    run.out.lines.map(&:chomp)
  end

  # The outcome of #run_ruby.
  RubyRun = Struct.new(:status, :out, :err, :timed_out, keyword_init: true) do
    def success? = !timed_out && status&.success?
  end

  # Runs +code+ in a new Ruby process with lib/ on the load path and evix
  # required; kills it (TERM, then KILL) after +timeout+ seconds.
  # @return [RubyRun]
  def run_ruby(code, timeout: 10, env: {}, stdin: "")
    lib = File.expand_path("../../lib", __dir__)
    command = [RbConfig.ruby, "-I", lib, "-revix", "-e", code]
    Open3.popen3(env, *command, pgroup: true) do |input, out, err, thread|
      input.write(stdin)
      input.close
      readers = [Thread.new { out.read }, Thread.new { err.read }]
      timed_out = thread.join(timeout).nil?
      if timed_out
        kill_group(thread.pid)
        thread.join
      end
      RubyRun.new(status: thread.value, out: readers[0].value, err: readers[1].value, timed_out: timed_out)
    end
  end

  # Kills whatever #fork_child child of this example is still running.
  def reap_children
    (@evix_children || []).each do |pid|
      next if Process.wait2(pid, Process::WNOHANG) # it had exited: reaped now

      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil # reaped already
    end
  end

  private

  # The child's side of #child_outcome.
  def report_outcome(reader, writer, stderr_path)
    reader.close
    $stderr.reopen(stderr_path, "w")
    $stderr.sync = true # what it wrote before a crash is what the failure shows
    outcome = begin
      [:value, yield]
    rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
      [:error, e.class.name, e.message, e.backtrace&.first(8)]
    end
    writer.write(Marshal.dump(outcome))
    writer.close
    exit!(0)
  end

  # What +reader+ gives until end of file or until +timeout+ seconds passed.
  def read_until_eof(reader, timeout)
    data = String.new(encoding: Encoding::BINARY)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    while (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)).positive?
      break unless reader.wait_readable(left)

      chunk = reader.read_nonblock(65_536, exception: false)
      break if chunk.nil?

      data << chunk unless chunk == :wait_readable
    end
    data
  end

  def kill_group(pid)
    Process.kill(:TERM, -pid)
    return if wait_pid(pid, 1)

    Process.kill(:KILL, -pid)
  rescue Errno::ESRCH
    nil
  end

  def wait_pid(pid, seconds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      return true unless File.exist?("/proc/#{pid}")

      sleep 0.01
    end
    false
  end
end

RSpec.configure do |config|
  config.include EvixChildProcess
  config.after { reap_children }
end
