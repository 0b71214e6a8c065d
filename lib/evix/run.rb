# frozen_string_literal: true

# Evix.run and Evix.offload: the scheduler as one call.
module Evix
  class << self
    # Runs the block in a fiber under an Evix::Scheduler and returns its
    # value once every fiber it scheduled has finished. Inside a fiber that
    # an Evix::Scheduler already runs, the block runs in a new fiber of that
    # scheduler. The block's exception is raised here; a signal (Interrupt,
    # SignalException) or exit (SystemExit) raised in any of its fibers ends
    # the run at once, without waiting for the other fibers.
    # @return [Object] the block's value
    def run(&block)
      raise ArgumentError, "Evix.run requires a block" unless block

      scheduler = Fiber.scheduler
      scheduler = nil if scheduler.is_a?(Scheduler) && scheduler.inherited?
      return nested_run(scheduler, &block) if scheduler.is_a?(Scheduler) && !Fiber.current.blocking?
      raise Error, "another fiber scheduler is set on this thread" if scheduler

      top_level_run(&block)
    end

    # Runs the block on the offload pool from a fiber of the current
    # Evix::Scheduler and returns its value (see Evix::Loop#offload).
    # @return [Object]
    def offload(&)
      scheduler = Fiber.scheduler
      raise Error, "Evix.offload must be called inside Evix.run" unless scheduler.is_a?(Scheduler)

      scheduler.loop.offload(&)
    end

    private

    def top_level_run(&)
      scheduler = Scheduler.new
      Fiber.set_scheduler(scheduler)
      outcome = nil
      Fiber.schedule { outcome = capture(&) }
      scheduler.run
      finish(outcome)
    rescue Exception # rubocop:disable Lint/RescueException -- re-raised
      scheduler&.abandon
      raise
    ensure
      Fiber.set_scheduler(nil) if Fiber.scheduler.equal?(scheduler)
      scheduler&.loop&.close
    end

    def nested_run(scheduler, &)
      outcome = nil
      waiter = Fiber.current
      Fiber.schedule do
        outcome = capture(&)
        scheduler.unblock(nil, waiter)
      end
      scheduler.block(nil) until outcome
      finish(outcome)
    end

    # A signal or exit is not captured: it unwinds to the loop and ends the
    # run (a fiber the block scheduled starts inside the block, so a TERM
    # landing there would otherwise wait for every other fiber, forever for a
    # server's accept loop).
    def capture
      [:value, yield]
    rescue SignalException, SystemExit
      raise
    rescue Exception => e # rubocop:disable Lint/RescueException -- re-raised by finish
      [:error, e]
    end

    def finish(outcome)
      kind, result = outcome
      raise result if kind == :error

      result
    end
  end
end
