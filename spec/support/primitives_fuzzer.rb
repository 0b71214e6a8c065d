# frozen_string_literal: true

# Random programs against Evix's tasks, primitives and nursery, checked
# against a model of what must hold whatever happens (as the core's
# tests/model.rs does for the loop):
#
# - every task ends, and every ensure block of a task that started runs once;
# - no Queue item is lost or duplicated: every push that returned is popped
#   or still queued, nothing comes out twice, nothing comes out that was not
#   pushed;
# - a Semaphore never has more holders than its limit and ends with every
#   place given back;
# - no file descriptor is left open;
# - under Evix.run, the first failure is the one the run raises.
#
# The program is spawns, queue pushes and pops, semaphore holds, condition
# waits and wakes, sleeps, waits on other tasks with and without timeouts,
# cancellations, raises, and calls from another thread (a cross-thread wake
# raises Evix::Error and changes nothing; a posted one works). Everything
# comes from one Random seeded with +seed+, so a failure replays; time only
# decides which timeouts pass first.
#
# `ruby -Ilib spec/support/primitives_fuzzer.rb` runs cases for
# EVIX_FUZZ_SECONDS (default 60), each in a forked child with a deadline,
# printing the seed of each (rake soak:primitives). EVIX_FUZZ_SEED=N replays
# one case.
class EvixPrimitivesFuzzer
  # An error raised on purpose by a task of the program.
  class Planned < StandardError; end

  STEPS = %i[push push pop pop acquire wait signal broadcast sleep join cancel raise
             cross_thread posted spawn].freeze

  # @return [Integer]
  attr_reader :seed

  def initialize(seed, tasks: 40, mode: nil)
    @seed = seed
    @rng = Random.new(seed)
    @task_budget = tasks
    @mode = mode || (@rng.rand(3).zero? ? :run : :loop)
    @tasks = []
    @started = Hash.new(0)
    @ensured = Hash.new(0)
    @pushed = []
    @popped = []
    @attempted = {}
    @next_item = 0
    @holders = 0
    @most_holders = 0
    @violations = []
    @planned = []
    @received = []
  end

  # Runs the program; returns the violations found (empty: all held).
  # @return [Array<String>]
  def run
    fds = open_fds
    @mode == :run ? run_nursery : run_loop
    check_items
    check_tasks
    check_semaphore
    GC.start # an fd kept only by garbage is not a leak
    leaked = open_fds - fds
    @violations << "fds left open: #{leaked.inspect}" unless leaked.empty?
    @violations
  end

  # Describes the case: seed and mode, for the failure message.
  # @return [String]
  def to_s
    "seed #{@seed} (#{@mode})"
  end

  private

  def setup_primitives
    @queue = Evix::Queue.new(@rng.rand(2).zero? ? nil : 1 + @rng.rand(3))
    @limit = 1 + @rng.rand(3)
    @semaphore = Evix::Semaphore.new(@limit)
    @condition = Evix::Condition.new
  end

  def run_loop
    setup_primitives
    @loop = Evix::Loop.new
    @sleep = ->(seconds) { @loop.sleep(seconds) }
    # Failures are the program's own: taken here, not raised out of #run.
    @spawn = ->(&body) { Evix::Task.new(@loop, on_finish: ->(_task, _error) { true }, &body) }
    @spawn.call { drive }
    @loop.run
    @loop.spawn { drain_queue }
    @loop.run
  ensure
    @loop&.close
  end

  def run_nursery
    setup_primitives
    @sleep = ->(seconds) { sleep(seconds) }
    @spawn = ->(&body) { Fiber.scheduler.spawn(&body) }
    failure = nil
    begin
      Evix.run(cancel_timeout: 5) { drive }
    rescue Planned => e
      failure = e
    end
    check_run_failure(failure)
    @violations << "Fiber.scheduler left set" if Fiber.scheduler
    Evix.run { drain_queue }
  end

  # The run raises one of the failures nobody waited for; none only if
  # every one was received by a waiter.
  def check_run_failure(failure)
    if failure
      @violations << "Evix.run raised #{failure.message}, which no task raised" unless @planned.include?(failure)
    elsif !(@planned - @received).empty?
      @violations << "Evix.run ended normally after #{(@planned - @received).map(&:message)}"
    end
  end

  def drain_queue
    while (item = @queue.pop(timeout: 0))
      record_pop(item)
    end
  end

  # The program's first task: spawns the others, with random pauses.
  def drive
    @task_budget.times do
      spawn_worker
      @sleep.call(@rng.rand(3) * 0.0005) if @rng.rand(3).zero?
    end
    @sleep.call(0.002)
    # Nothing may stay parked for good: wake whatever still waits.
    @queue.close
    @condition.broadcast(:end)
    @tasks.each { |task| task.cancel("fuzz over") if task.alive? && @rng.rand(4).zero? }
  end

  def spawn_worker
    id = @tasks.size
    steps = Array.new(1 + @rng.rand(4)) { STEPS.sample(random: @rng) }
    timeouts = Array.new(steps.size) { @rng.rand(3).zero? ? nil : @rng.rand(4) * 0.0005 }
    ensure_sleeps = @rng.rand(3).zero?
    body = lambda do
      @started[id] += 1
      steps.each_with_index { |step, i| perform(step, timeouts[i], id) }
      id
    ensure
      @ensured[id] += 1
      @sleep.call(0.0003) if ensure_sleeps # an ensure that waits
    end
    @tasks << @spawn.call(&body)
  end

  def perform(step, timeout, id) # rubocop:disable Metrics/CyclomaticComplexity -- one branch per step
    case step
    when :push then push_item
    when :pop then (item = @queue.pop(timeout: timeout || 0.002)) && record_pop(item)
    when :acquire then hold_semaphore
    when :wait then @condition.wait(timeout: timeout || 0.002)
    when :signal then @condition.signal(id)
    when :broadcast then @condition.broadcast(id)
    when :sleep then @sleep.call(timeout || 0)
    when :join then join_other(timeout)
    when :cancel then other_task&.cancel("cancelled by #{id}")
    when :raise then raise_planned(id)
    when :cross_thread then cross_thread_call
    when :posted then posted_call
    when :spawn then spawn_worker if @tasks.size < @task_budget * 2
    end
  end

  def push_item
    item = (@next_item += 1)
    @attempted[item] = true
    @queue.push(item)
    @pushed << item
  rescue Evix::ClosedError
    nil
  end

  def record_pop(item)
    @violations << "popped #{item.inspect}, which was never pushed" unless @attempted.key?(item)
    @popped << item
  end

  def hold_semaphore
    @semaphore.acquire do
      @holders += 1
      @most_holders = [@most_holders, @holders].max
      @sleep.call(@rng.rand(2) * 0.0005)
    ensure
      @holders -= 1
    end
  end

  def join_other(timeout)
    other = other_task
    return unless other && !other.equal?(Evix::Task.current)

    other.wait(timeout: timeout || 0.003)
  rescue Planned => e
    @received << e
  rescue Evix::TimeoutError
    nil
  rescue Evix::CancelledError => e
    raise unless others_cancellation?(other, e) # this task's own: it must unwind
  end

  def others_cancellation?(other, error)
    return false if other.alive?

    other.wait
  rescue Evix::CancelledError => e
    e.equal?(error)
  end

  def other_task
    @tasks.sample(random: @rng)
  end

  def raise_planned(id)
    error = Planned.new("planned failure of task #{id}")
    @planned << error
    raise error
  end

  # A wake from another thread: with waiters on this loop it raises
  # Evix::Error and must change nothing; without, it may go through.
  def cross_thread_call
    what = @rng.rand(3)
    item = (@next_item += 1)
    Thread.new do
      case what
      when 0 then @condition.signal(:thread)
      when 1 then @queue.close
      else
        @attempted[item] = true
        @queue.push(item)
        @pushed << item
      end
    rescue Evix::Error # a waiter of the loop's thread (or a full queue): nothing changed
      nil
    end.join
  end

  # The right way across threads: post the wake to the loop's thread.
  def posted_call
    loop = Evix::Task.current.loop
    condition = @condition
    Thread.new do
      loop.post { condition.broadcast(:posted) }
    rescue Evix::ClosedError # the run ended meanwhile (Thread#join let the loop go on)
      nil
    end.join
  end

  def check_items
    counts = @popped.tally
    duplicated = counts.select { |_item, n| n > 1 }.keys
    @violations << "items popped twice: #{duplicated.first(5).inspect}" unless duplicated.empty?
    lost = @pushed - @popped
    @violations << "items pushed and never popped: #{lost.first(5).inspect}" unless lost.empty?
  end

  def check_tasks
    alive = @tasks.select(&:alive?)
    @violations << "#{alive.size} tasks never ended: #{alive.first(3).map(&:inspect)}" unless alive.empty?
    @tasks.each_index do |id|
      next if @started[id].zero? && @ensured[id].zero? # cancelled before it started

      @violations << "task #{id} started #{@started[id]} times" unless @started[id] == 1
      @violations << "task #{id}'s ensure ran #{@ensured[id]} times" unless @ensured[id] == 1
    end
  end

  def check_semaphore
    @violations << "#{@most_holders} holders of a Semaphore(#{@limit})" if @most_holders > @limit
    return if @semaphore.count.zero?

    @violations << "the Semaphore ends with #{@semaphore.count} places taken"
  end

  def open_fds
    Dir.children("/proc/self/fd").map(&:to_i).sort
  rescue Errno::ENOENT
    []
  end
end

if $PROGRAM_NAME == __FILE__
  require "evix"

  # Runs one case in a forked child; a case that hangs past +deadline+ is a failure.
  def fuzz_case(seed, deadline)
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      writer.write(Marshal.dump(EvixPrimitivesFuzzer.new(seed).run))
      exit!(0)
    rescue Exception => e # rubocop:disable Lint/RescueException -- reported as the case's failure
      writer.write(Marshal.dump(["raised #{e.class}: #{e.message} at #{e.backtrace&.first(6)&.join(" < ")}"]))
      exit!(1)
    end
    writer.close
    violations = reader.wait_readable(deadline) ? Marshal.load(reader.read) : ["hung for #{deadline}s"] # rubocop:disable Security/MarshalLoad -- our child
    Process.kill(:KILL, pid) if violations == ["hung for #{deadline}s"]
    Process.wait(pid)
    violations
  rescue EOFError, TypeError, ArgumentError
    ["the child died without a report"]
  ensure
    reader&.close
  end

  seconds = Float(ENV.fetch("EVIX_FUZZ_SECONDS", "60"))
  seeds = ENV["EVIX_FUZZ_SEED"] ? [Integer(ENV["EVIX_FUZZ_SEED"])] : nil
  base = Random.new_seed % 1_000_000_000
  puts "evix primitives fuzzer: #{seeds ? "seed #{seeds.first}" : "seeds from #{base}, #{seconds} s"}"
  stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  failed = []
  count = 0
  (seeds || (base..)).each do |seed|
    break if !seeds && Process.clock_gettime(Process::CLOCK_MONOTONIC) > stop

    count += 1
    violations = fuzz_case(seed, 30)
    next if violations.empty?

    failed << seed
    puts "FAILED seed #{seed} (replay: EVIX_FUZZ_SEED=#{seed}): #{violations.first(3).join("; ")}"
  end
  puts "#{count} cases, #{failed.size} failed#{": seeds #{failed.join(", ")}" unless failed.empty?}"
  exit(failed.empty? ? 0 : 1)
end
