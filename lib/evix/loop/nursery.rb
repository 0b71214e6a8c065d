# frozen_string_literal: true

module Evix
  # The tasks of one Evix::Scheduler (every Fiber.schedule under Evix.run),
  # and how their failures end the run (docs/architecture.md, "Failure and
  # cancellation"): the first unhandled
  # exception cancels every other task, their ensure blocks run for up to
  # +cancel_timeout+ seconds, then the first exception is raised; later ones
  # are in its #suppressed. A task still running past the bound is
  # abandoned with a warning naming it.
  class Nursery
    # How long #drive blocks at a time while every task waits on another thread.
    IDLE_POLL = 1.0

    # The longest turn #drive asks of the loop while a deadline runs: any
    # finite cancel_timeout is taken (10**30 seconds is "no bound"), and the
    # loop's own waits take only what a Duration can hold.
    LONGEST_TURN = 60.0

    # @return [Exception, nil] the first unhandled exception
    attr_reader :failure

    # @param loop [Evix::Loop]
    # @param cancel_timeout [Numeric] seconds cancelled tasks get to finish
    #   (finite, not negative)
    # @param woken_from_outside [#call, nil] true when something outside the
    #   loop may still end a parked wait (Evix::Scheduler: a fiber blocked on
    #   a Mutex or Queue while other threads live); nil: nothing can
    # @raise [TypeError, ArgumentError] any other cancel_timeout
    def initialize(loop, cancel_timeout: 5, woken_from_outside: nil)
      @loop = loop
      @cancel_timeout = Arguments.seconds(cancel_timeout, "cancel_timeout")
      @woken_from_outside = woken_from_outside
      @pid = Process.pid
      @tasks = {}.compare_by_identity # each task => the on_finish its spawner gave, or nil
      @task_finished = method(:finished) # one for every task: no Proc per spawn
      @failure = nil
      @suppressed = []
      @deadline = nil
    end

    # Runs the block as a task of this nursery.
    # @param now [Boolean] true: start it now; false: on the loop's next tick
    # @param on_finish [#call, nil] also told when the task ends (see
    #   Evix::Task#initialize); if it takes the task's exception, the nursery
    #   leaves it alone
    # @return [Evix::Task]
    def spawn(now: true, on_finish: nil, &block)
      task = Task.new(@loop, start: !now, on_finish: @task_finished, &block)
      @tasks[task] = on_finish
      task.start if now
      task
    end

    # Fiber.schedule: runs the block as a task now, like #spawn.
    # @return [Fiber] the task's fiber (the task lets go of it once it ends)
    def spawn_fiber(&)
      task = Task.new(@loop, start: false, on_finish: @task_finished, &)
      @tasks[task] = nil
      task.start
    end

    # @return [Integer] tasks that have not finished
    def size
      @tasks.size
    end

    # Records +error+ as the run's failure (or a suppressed one) and cancels
    # every task; for an exception raised outside the tasks (a signal in
    # the loop's wait, Thread#raise).
    #
    # A second Interrupt or SignalException (Ctrl-C, SIGTERM) while the
    # tasks are being cancelled cuts their time short: they are abandoned
    # at once.
    # @return [nil]
    def fail_with(error)
      if @failure.nil?
        @failure = error
        cancel_all("#{error.class}: #{error.message}")
      elsif !error.is_a?(CancelledError) && !error.equal?(@failure)
        @suppressed << error unless @suppressed.any? { |seen| seen.equal?(error) }
        abandon("#{error.class} while being cancelled") if error.is_a?(SignalException)
      end
      nil
    end

    # Cancels every task (their ensure blocks run) and starts the bound on
    # how long #drive waits for them.
    # @param reason [String, nil] the message of their Evix::CancelledError
    # @return [nil]
    def cancel_all(reason = nil)
      @deadline ||= clock + @cancel_timeout
      @loop.stop unless @loop.closed? # #drive's Loop#run returns to watch the deadline
      current = Task.current
      @tasks.each_key { |task| task.cancel(reason && "cancelled: #{reason}") unless task.equal?(current) }
      nil
    end

    # Runs the loop until every task has finished, or the cancellation bound
    # passed, or the tasks left can no longer be woken. Tasks parked outside
    # any wait of the loop are abandoned with a warning. Tasks parked in the
    # loop's waits with nothing that could end them (see #deadlocked?) are a
    # deadlock: it fails the run with an Evix::Error naming each task and
    # where it waits, and cancels them all (if they deadlock again, they are
    # abandoned).
    # @return [nil]
    def drive
      until @tasks.empty?
        left = @deadline && (@deadline - clock)
        return abandon("still running #{@cancel_timeout}s after cancellation") if left && left <= 0

        alive = @loop.alive?
        return abandon("parked outside any wait of the loop") if stuck?(alive)

        if deadlocked?(alive)
          return abandon("deadlocked") if @failure

          fail_with(deadlock_error)
          next
        end
        turn(alive, left)
      end
      nil
    end

    # Raises the failure, if any, with the later exceptions in #suppressed
    # (once: it is reported by whoever asks first).
    # @return [nil]
    def raise_failure
      return if @failure.nil? || @reported

      @reported = true
      @failure.extend(Suppressed) unless @failure.is_a?(Suppressed)
      @failure.suppressed.concat(@suppressed - @failure.suppressed)
      raise @failure
    end

    # Gives up on the tasks left, with a warning naming each: the run ends
    # without them.
    # @param why [String] said in each warning
    # @return [nil]
    def abandon(why)
      @tasks.each_key { |task| warn "evix: abandoned #{task.inspect} (#{why})" }
      @tasks.clear
      @loop.stop unless @loop.closed?
      nil
    end

    private

    # A task ended with +error+ if nobody waited for it: the first such
    # failure fails the run. True: the nursery took the error.
    def finished(task, error)
      also = @tasks.delete(task)
      # The last task ended: #drive's run_once must not go on to block. In a
      # child forked without a block the forking fiber is the child's root
      # fiber, and its end ends the child: the parent's loop is not touched.
      @loop.stop if @tasks.empty? && Process.pid == @pid
      return true if also&.call(task, error)
      return false if error.nil? || error.is_a?(CancelledError)

      fail_with(error)
      true
    end

    # Runs the loop: without a deadline, turns in C until the last task
    # ends or cancellation starts (both stop the loop) or nothing is left to
    # wait for; else one turn, bounded by the deadline (and by IDLE_POLL
    # while every task waits on another thread).
    def turn(alive, left)
      return @loop.run if alive && left.nil?

      @loop.run_once(alive ? [left, LONGEST_TURN].min : [left || IDLE_POLL, IDLE_POLL].min)
    end

    # Nothing can resume the remaining tasks: the loop has nothing to do and
    # none of them waits on it (a wait for another thread counts).
    def stuck?(alive)
      !alive && @loop.waiters.zero?
    end

    # Tasks wait in the loop and nothing can end their waits: the loop has
    # nothing referenced (no watcher, timer, hold such as an offload job, nor
    # queued or posted callback) and no signal block, and nothing outside it
    # may end one either.
    def deadlocked?(alive)
      !alive && @loop.waiters.positive? && !@loop.handles_signals? && !@woken_from_outside&.call
    end

    def deadlock_error
      waits = @tasks.each_key.map { |task| "  #{task.inspect} waits #{where(task)}" }
      Error.new("deadlock: #{@tasks.size} task(s) wait and nothing can wake them " \
                "(no watcher, timer, hold, post, signal block or other thread):\n#{waits.join("\n")}")
    end

    # The first frame of the task's fiber outside evix: the wait it is in.
    def where(task)
      frames = task.fiber&.backtrace_locations || []
      frame = frames.find { |f| !f.path.start_with?(LIB, "<internal:") } || frames.first
      frame ? "at #{frame}" : "outside any wait of the loop"
    end

    LIB = File.expand_path("..", __dir__)
    private_constant :LIB

    def clock
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
