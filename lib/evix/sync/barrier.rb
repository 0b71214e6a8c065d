# frozen_string_literal: true

module Evix
  # A group of tasks that end together: #async spawns them on the current
  # task's loop, #wait waits for all. The first one to fail cancels the
  # others (their ensure blocks run) and #wait raises it once they have all
  # ended; later failures are in #errors and in that exception's
  # #suppressed. A child's failure is the barrier's to report, so it is not
  # raised out of the loop.
  #
  #   barrier = Evix::Barrier.new
  #   pages = urls.map { |url| barrier.async { fetch(url) } }
  #   barrier.wait                  # raises the first failure
  #   pages.map(&:wait)
  class Barrier
    # @return [Array<Exception>] every child's failure, in the order they
    #   happened (cancellation is not a failure)
    attr_reader :errors

    # An empty barrier: no children, no errors.
    def initialize
      @tasks = {}.compare_by_identity # the children still running (a set: O(1) to leave)
      @errors = []
      @done = WaitList.new("Evix::Barrier#wait")
    end

    # Runs the block in a new task on the current task's loop (started on
    # its next tick), as a child of this barrier. Under Evix.run the child
    # is one of the run's fibers: the run waits for it like for
    # Fiber.schedule ones.
    # @return [Evix::Task]
    # @raise [Evix::Error] outside a task
    def async(&block)
      raise ArgumentError, "Evix::Barrier#async requires a block" unless block

      loop = WaitList.current_loop("Evix::Barrier#async must be called inside #{WaitList::TASKS}")
      task = spawn_child(loop, Fiber.scheduler, &block)
      @tasks[task] = true if task.alive?
      task
    end

    # Waits (only the calling task) until every child has ended.
    # @return [nil]
    # @raise [Exception] the first child's failure, with the later ones in
    #   its #suppressed (see Evix::Suppressed)
    # @raise [Evix::Error] when it must wait outside a task
    def wait
      @done.wait until @tasks.empty?
      raise_first_error
      nil
    end

    # @return [Integer] children still running (or not started yet)
    def size
      @tasks.size
    end

    # Cancels every running child (see Evix::Task#cancel); does not wait.
    # @return [nil]
    def cancel
      @tasks.dup.each_key(&:cancel) # a copy: a cancelled child leaves @tasks
      nil
    end

    private

    # A fiber scheduler that spawns tasks on this loop (Evix::Scheduler
    # under Evix.run) takes the child, so that its run waits for it.
    def spawn_child(loop, scheduler, &)
      if scheduler.respond_to?(:spawn) && scheduler.respond_to?(:loop) && scheduler.loop.equal?(loop)
        scheduler.spawn(on_finish: method(:finished), &)
      else
        Task.new(loop, on_finish: method(:finished), &)
      end
    end

    # A child ended: forget it; the first failure cancels the others.
    # True for a failure: the barrier reports it, the loop does not.
    def finished(task, error)
      @tasks.delete(task)
      failed = error && !task.cancelled?
      if failed
        @errors << error
        cancel if @errors.size == 1
      end
      @done.wake_all
      failed
    end

    def raise_first_error
      first = @errors.first
      return unless first

      first.extend(Suppressed) unless first.is_a?(Suppressed)
      first.suppressed.replace(@errors.drop(1))
      raise first
    end
  end
end
