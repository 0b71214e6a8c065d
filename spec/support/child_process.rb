# frozen_string_literal: true

require "open3"
require "rbconfig"

# Runs code that may hang or kill the process somewhere it cannot hang or kill
# the suite: a forked child, or a fresh Ruby, each with a deadline.
module EvixChildProcess
  # Runs the block in a forked child and returns its value (Marshal-able), or
  # [:error, class name, message] if it raised. Raises if the child hung for
  # +timeout+ seconds (it is killed) or died without a result.
  def in_child(timeout: 5)
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      result = begin
        yield
      rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
        [:error, e.class.name, e.message]
      end
      writer.write(Marshal.dump(result))
      writer.close
      exit!(0)
    end
    writer.close
    status = wait_child(pid, timeout: timeout)
    data = reader.read
    raise "the child hung for #{timeout}s or died (#{status.inspect})" if data.empty?

    Marshal.load(data) # rubocop:disable Security/MarshalLoad -- our own child's data
  ensure
    reader&.close
    writer&.close unless writer&.closed?
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

  private

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

RSpec.configure { |config| config.include EvixChildProcess }
