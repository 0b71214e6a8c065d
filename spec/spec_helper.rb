# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "evix"
require "socket"
require "timeout"

# Raised on purpose by specs that check how callback exceptions propagate.
class EvixSpecError < StandardError; end

# Helpers shared by every spec file.
module EvixSpecHelpers
  # A new loop that the `after` hook closes.
  def new_loop(backend = nil)
    evloop = backend ? Evix::Loop.new(backend: backend) : Evix::Loop.new
    (@evix_loops ||= []) << evloop
    evloop
  end

  # Yields a new loop and closes it afterwards, whatever happens.
  def with_loop(backend = nil)
    evloop = backend ? Evix::Loop.new(backend: backend) : Evix::Loop.new
    yield evloop
  ensure
    evloop&.close
  end

  # IO objects that the `after` hook closes.
  def track_io(*ios)
    (@evix_ios ||= []).concat(ios)
    ios
  end

  def pipe
    track_io(*IO.pipe)
  end

  def socket_pair
    track_io(*UNIXSocket.pair)
  end

  # An Evix::TCPServer or Evix::UNIXServer that the `after` hook shuts down
  # (before the loops close).
  def track_server(server)
    (@evix_servers ||= []) << server
    server
  end

  # A thread that the `after` hook kills if it is still running.
  def helper_thread(&)
    thread = Thread.new(&)
    (@evix_threads ||= []) << thread
    thread
  end

  # A safety net for specs that block in the loop: after `after` seconds the
  # returned pipe's write end gets a byte, so a watcher on the read end wakes
  # the loop even if the mechanism under test (wakeup, post, signals) is broken.
  def rescue_pipe(after: 3)
    r, w = pipe
    helper_thread do
      sleep after
      w.write("!")
    rescue IOError, SystemCallError
      nil
    end
    r
  end

  def fd_count
    Dir.children("/proc/self/fd").size
  end

  # The lowest fd number >= start that is not open in this process.
  def unused_fd(start = 9999)
    fd = start
    fd += 1 while File.exist?("/proc/self/fd/#{fd}")
    fd
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Seconds the block took.
  def elapsed
    t0 = now
    yield
    now - t0
  end

  # Polls the block until it returns truthy; fails the example after `timeout`.
  def wait_until(timeout: 2, interval: 0.005)
    deadline = now + timeout
    until (result = yield)
      raise RSpec::Expectations::ExpectationNotMetError, "condition not met within #{timeout}s" if now > deadline

      sleep interval
    end
    result
  end

  # Runs +evloop+ until the block returns truthy; fails after +timeout+.
  def run_until(evloop, timeout: 5, slice: 0.01)
    deadline = now + timeout
    until (result = yield)
      raise RSpec::Expectations::ExpectationNotMetError, "condition not met within #{timeout}s" if now > deadline

      evloop.run_once(slice)
    end
    result
  end

  # Runs +evloop+ for about +seconds+.
  def run_for(evloop, seconds)
    deadline = now + seconds
    evloop.run_once([deadline - now, 0].max) while now < deadline
  end

  # Moves as many objects as the running Ruby can.
  def compact_heap
    if GC.respond_to?(:verify_compaction_references)
      # Ruby 3.3 renamed double_heap to expand_heap.
      grow = RUBY_VERSION >= "3.3" ? :expand_heap : :double_heap
      GC.verify_compaction_references(grow => true, toward: :empty)
    elsif GC.respond_to?(:compact)
      GC.compact
    else
      GC.start
    end
  end

  # Waits for a forked child without hanging the suite; kills it after `timeout`.
  def wait_child(pid, timeout: 5)
    deadline = now + timeout
    loop do
      waited = Process.wait2(pid, Process::WNOHANG)
      return waited[1] if waited
      break if now > deadline

      sleep 0.01
    end
    Process.kill(:KILL, pid)
    Process.wait2(pid)[1]
  end

  # Whether a backtrace contains `file:line` (file compared by basename).
  def backtrace_includes?(exception, file, line)
    (exception.backtrace || []).any? { |entry| entry.include?("#{File.basename(file)}:#{line}:") }
  end

  def shutdown_servers
    (@evix_servers || []).each do |server|
      server.shutdown(timeout: 0) # stops accepting and closes what is left
    rescue StandardError
      nil
    end
  end

  def cleanup_evix_resources
    shutdown_servers
    errors = []
    (@evix_threads || []).each do |thread|
      thread.kill
      thread.join(1)
    end
    (@evix_loops || []).each do |evloop|
      evloop.close
    rescue StandardError => e
      errors << e
    end
    (@evix_ios || []).each { |io| io.close unless io.closed? }
    raise errors.first unless errors.empty?
  end
end

# Tag `timing: true` an example whose assertions depend on elapsed time (a
# bound on a duration, an order set by sleeps or timers of different lengths,
# a limit of a few seconds on work that GC.stress slows down): rake
# spec:gc_stress leaves it out (spec/reliability/support/gc_stress.rb).
RSpec.configure do |config|
  config.expect_with :rspec do |expectations|
    expectations.syntax = :expect
    expectations.include_chain_clauses_in_custom_matcher_descriptions = true
  end
  config.mock_with :rspec do |mocks|
    mocks.verify_partial_doubles = true
  end
  config.disable_monkey_patching!
  config.shared_context_metadata_behavior = :apply_to_host_groups
  config.filter_run_when_matching :focus
  config.order = :random
  Kernel.srand config.seed

  config.include EvixSpecHelpers

  # Per-example guard: a loop that never returns fails the example instead of
  # hanging the suite. Timeout raises into the main thread while it is blocked
  # in the loop's poll, which is exactly what the loop must allow.
  example_timeout = Float(ENV.fetch("EVIX_SPEC_TIMEOUT", "10"))
  config.around do |example|
    Timeout.timeout(example_timeout) { example.run }
  end

  config.after do
    cleanup_evix_resources
  end
end

Dir[File.join(__dir__, "support", "**", "*.rb")].each { |file| require file }
