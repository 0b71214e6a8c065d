# frozen_string_literal: true

module Evix
  # A fiber driven by a loop (see Evix::Loop#spawn). Its value, or its
  # exception, is available through #wait.
  class Task
    # @param loop [Evix::Loop] the loop that drives the fiber
    def initialize(loop, &block)
      @loop = loop
      @waiters = []
      @state = :pending
      @fiber = Fiber.new { run(block) }
      loop.next_tick { resume }
    end

    # @return [Boolean] true until the block returned, raised or was cancelled
    def alive?
      @state == :pending || @state == :running
    end

    # Waits for the task and returns its value, or raises its exception.
    # Inside another task the calling fiber waits; outside, the loop runs
    # until the task is done.
    # @return [Object] the block's value
    def wait
      if alive?
        Task.current ? wait_in_fiber : drive_loop
      end
      raise @error if @error

      @value
    end

    # Raises Evix::CancelledError inside the task (its ensure blocks run).
    # A task cancelled before it started never runs. Idempotent.
    # @return [nil]
    def cancel
      case @state
      when :pending
        finish(:cancelled, nil, CancelledError.new("task was cancelled"))
      when :running
        raise CancelledError, "task was cancelled" if @fiber == Fiber.current

        @fiber.raise(CancelledError, "task was cancelled")
      end
      nil
    end

    # Resumes the task's fiber with +value+ (used by the loop's callbacks).
    # @api private
    def resume(value = nil)
      @fiber.resume(value) if alive?
    end

    # The task whose fiber is running, or nil.
    # @return [Evix::Task, nil]
    def self.current
      Thread.current[:evix_task]
    end

    private

    # Runs the loop until the task is done; with nothing referenced left a
    # post from another thread may still come, so wait in short slices.
    def drive_loop
      @loop.run_once(@loop.alive? ? nil : 0.1) while alive?
    end

    def wait_in_fiber
      fiber = Fiber.current
      @waiters << fiber
      Fiber.yield while alive?
    ensure
      @waiters.delete(fiber)
    end

    def run(block)
      Thread.current[:evix_task] = self
      @state = :running
      value = block.call
      finish(:done, value, nil)
    rescue CancelledError => e
      finish(:cancelled, nil, e)
    rescue Exception => e # rubocop:disable Lint/RescueException -- surfaced through #wait or run
      waited = finish(:failed, nil, e)
      raise unless waited
    end

    def finish(state, value, error)
      @state = state
      @value = value
      @error = error
      @waiters.each { |fiber| @loop.next_tick { fiber.resume if @waiters.include?(fiber) } }
      !@waiters.empty?
    end
  end

  # Raised in a task by Evix::Task#cancel, and by #wait on a cancelled task.
  class CancelledError < Error; end
end
