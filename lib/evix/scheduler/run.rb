# frozen_string_literal: true

require "English"

# Evix.run: the scheduler as one call; Evix.offload from its fibers.
module Evix
  class << self
    # Runs the block on the offload pool from a fiber of the current
    # Evix::Scheduler and returns its value (see Evix::Loop#offload).
    # @yieldreturn [Object] what the call returns
    # @return [Object] the block's value
    # @raise [Evix::Error] outside Evix.run
    # @raise [Exception] the block's exception
    def offload(&)
      scheduler = Fiber.scheduler
      raise Error, "Evix.offload must be called inside Evix.run" unless scheduler.is_a?(Scheduler)

      scheduler.loop.offload(&)
    end

    # Runs the block in a fiber under an Evix::Scheduler and returns its
    # value once every fiber it scheduled has finished. Inside a fiber that
    # an Evix::Scheduler already runs, the block runs in a new fiber of that
    # scheduler.
    #
    # The run is a nursery (Evix::Nursery): the first unhandled exception,
    # from the block or any of its fibers, or an Interrupt, signal, exit or
    # Thread#kill that reaches the run, cancels every other fiber, lets their
    # ensure blocks run for up to +cancel_timeout+ seconds, then propagates;
    # later exceptions are in its #suppressed.
    # @param cancel_timeout [Numeric] seconds cancelled fibers get to finish
    # @yieldreturn [Object] what the run returns
    # @return [Object] the block's value
    # @raise [ArgumentError] without a block
    # @raise [Evix::Error] another fiber scheduler is set on this thread, or
    #   the caller is a task of a plain Evix::Loop
    # @raise [Exception] the run's first failure (later ones in its #suppressed)
    def run(cancel_timeout: 5, &block)
      raise ArgumentError, "Evix.run requires a block" unless block

      scheduler = Fiber.scheduler
      scheduler = nil if scheduler.is_a?(Scheduler) && scheduler.inherited?
      return nested_run(scheduler, &block) if scheduler.is_a?(Scheduler) && !Fiber.current.blocking?
      raise Error, "another fiber scheduler is set on this thread" if scheduler

      if (task = live_task)
        # Its tasks would end into the thread's root fiber, not back into this one.
        raise Error, "Evix.run cannot run inside a task of another Evix::Loop (#{task.inspect}); " \
                     "spawn the work on that loop instead"
      end

      top_level_run(cancel_timeout, &block)
    end

    private

    # The calling task, if its loop is open and this process's (not one
    # inherited through fork, where a fresh run is the way on).
    def live_task
      task = Task.current
      return unless task

      task.loop.alive? # Evix::Error on a loop inherited through fork, or closed
      task
    rescue Error
      nil
    end

    def top_level_run(cancel_timeout, &)
      scheduler = Scheduler.new(cancel_timeout: cancel_timeout)
      scheduler.loop.on_stall_from_env # EVIX_STALL_MS: report stalls on $stderr
      Fiber.set_scheduler(scheduler)
      nursery = scheduler.nursery
      task = nursery.spawn(&)
      drive(nursery, block_task: task)
      nursery.raise_failure
      finished = true
      task.wait(timeout: 0) # an abandoned block: Evix::TimeoutError, never a hang
    rescue Exception => e # rubocop:disable Lint/RescueException -- re-raised, with the caller's frames
      raise Backtrace.for_run(e, caller)
    ensure
      # Thread#kill unwinds through here with no exception to rescue.
      drive(nursery, "the thread is being killed") if nursery && !finished && !$ERROR_INFO
      Fiber.set_scheduler(nil) if scheduler && Fiber.scheduler.equal?(scheduler)
      scheduler&.loop&.close
    end

    # Drives the nursery to its end; an exception raised into the loop's own
    # fiber (a signal, Thread#raise) fails the run like any fiber's, and the
    # cancelled fibers still get their bounded time. The same exception
    # again with no task ended or added since is not retried (that would
    # spin): the tasks left are abandoned.
    def drive(nursery, killed = nil, block_task: nil)
      nursery.cancel_all(killed) if killed
      last = nil
      begin
        nursery.drive
      rescue Exception => e # rubocop:disable Lint/RescueException -- becomes the run's failure
        Backtrace.arrived(e, block_task&.alive? ? block_task.fiber.backtrace : []) unless nursery.failure
        nursery.fail_with(e)
        seen = [e.class, e.message, nursery.size]
        return nursery.abandon("#{e.class} raised again while driving the run") if seen == last

        last = seen
        retry
      end
    end

    def nested_run(scheduler, &)
      outcome = nil
      waiter = Fiber.current
      Fiber.schedule do
        outcome = capture(&)
        scheduler.unblock(nil, waiter)
      end
      scheduler.block(nil) until outcome
      kind, result = outcome
      raise result if kind == :error

      result
    end

    def capture
      [:value, yield]
    rescue Exception => e # rubocop:disable Lint/RescueException -- re-raised by nested_run
      [:error, e]
    end
  end
end
