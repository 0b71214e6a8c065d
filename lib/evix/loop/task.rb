# frozen_string_literal: true

module Evix
  # A fiber driven by a loop: `loop.spawn { }`, and under Evix.run every
  # `Fiber.schedule { }`. It ends with a value, an exception, or
  # cancellation; #wait hands each back.
  #
  # The loop switches to a task's fiber by transfer, and a task waits by
  # transferring back to the fiber that runs the loop, so a wait made in a
  # fiber the task resumed itself (an Enumerator, a nested Fiber) still goes
  # to the loop.
  class Task
    # @return [Evix::Loop] the loop that drives the task
    attr_reader :loop

    # @return [Fiber, nil] the task's fiber while it runs; nil before it
    #   starts and once it has ended (see #finish)
    attr_reader :fiber

    # @param loop [Evix::Loop] the loop that drives the fiber
    # @param start [Boolean] true: start on the loop's next tick (Loop#spawn);
    #   false: the creator calls #start
    # @param on_finish [#call, nil] called with the task and, if nobody
    #   waited for it, its exception (else nil) once it has ended, after its
    #   waiters are woken, in the fiber that ended it; a truthy result means
    #   the exception is taken care of (by a Nursery or a Barrier), so it is
    #   not raised out of the loop's run
    def initialize(loop, start: true, on_finish: nil, &block)
      raise ArgumentError, "Evix::Task requires a block" unless block

      @loop = loop
      @on_finish = on_finish
      @thread = Thread.current
      @waiting = nil # tokens of the fibers waiting in #wait, once one does
      @state = :pending
      @block = block
      @fiber = nil # made by #start, so that a burst of tasks' fibers die young
      @born = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      loop.next_tick { self.start } if start
    end

    # Runs the task's fiber now, until it first waits or ends (a no-op once
    # it started or was cancelled).
    # @api private
    # @return [Fiber, nil] the fiber it started
    def start
      return unless @state == :pending

      block = @block
      @block = nil
      fiber = @fiber = Fiber.new { run(block) }
      Task.fiber_started
      @loop.start(fiber)
      fiber
    end

    # @return [Symbol] :pending, :running, :done, :failed or :cancelled
    attr_reader :state

    # @return [Boolean] true until the block returned, raised or was cancelled
    def alive?
      @state == :pending || @state == :running
    end

    # @return [Float] seconds since the task was created
    def age
      Process.clock_gettime(Process::CLOCK_MONOTONIC) - @born
    end

    # @return [Boolean] whether the task ended by cancellation
    def cancelled?
      @state == :cancelled
    end

    # Waits for the task and returns its value, or raises its exception
    # (Evix::CancelledError if it was cancelled). Inside a task, of this
    # loop or another one (on any thread), only that task waits; outside,
    # this loop runs until the task is done.
    # @param timeout [Numeric, nil] seconds to wait at most; then
    #   Evix::TimeoutError (the task keeps running)
    # @return [Object] the block's value
    # @raise [ArgumentError, TypeError] a timeout that is not a finite,
    #   non-negative number of seconds
    def wait(timeout: nil)
      # As Thread#join raises for the current thread: it would wait for ever.
      raise Error, "a task cannot wait for itself (#{inspect})" if alive? && equal?(Task.current)

      Arguments.seconds(timeout, "timeout") if timeout
      if alive?
        current = Task.current
        current ? wait_in_fiber(current.loop, timeout) : drive_loop(timeout)
        raise TimeoutError, "task still running after #{timeout}s" if alive?
      end
      raise @error if @error

      @value
    end

    # Cancels the task: Evix::CancelledError is raised in it at its current
    # wait point, or its next one (its ensure blocks run). A task cancelled
    # before it started never runs. A no-op on a finished task, and on one
    # already cancelled: a second CancelledError would cut short the ensure
    # blocks the first one started. Safe from any thread (from another one
    # it is posted to the loop's).
    # @param reason [String, nil] the CancelledError's message
    # @return [nil]
    def cancel(reason = nil)
      unless Thread.current == @thread
        @loop.post { cancel(reason) }
        return
      end

      error = CancelledError.new(reason || "task was cancelled")
      case @state
      when :pending
        @block = nil
        finish(:cancelled, nil, error)
      when :running
        return if @cancel_sent # it is unwinding: let its ensure blocks finish

        @cancel_sent = true
        raise error if @fiber == Fiber.current

        @loop.interrupt(@fiber, error)
      end
      nil
    end

    # Fibers that may end between two garbage collections before evix asks
    # for one (more while more fibers live): about 14 KB of stack and two
    # memory mappings each, which the GC does not count.
    STACKS_PER_GC = 2048
    @live = 0 # task fibers started and not ended, in this process
    @ended = 0
    @gc_count = 0

    class << self
      # Notes that a task's fiber started (see .fiber_ended).
      # @api private
      # @return [Integer]
      def fiber_started
        @live += 1
      end

      # Notes that a task's fiber is ending. The stack of a fiber that ended
      # after a transfer is freed only when the GC frees its Fiber object,
      # and the GC does not see stacks: a burst of short tasks that allocate
      # little would otherwise run out of memory mappings before any
      # collection. So once as many fibers ended without a collection as
      # still live (and at least STACKS_PER_GC), a minor one runs: a
      # collection scans every live fiber's stack, and this keeps its cost
      # per ended fiber constant.
      # @api private
      # @return [nil]
      def fiber_ended
        @live -= 1
        count = GC.count
        if count != @gc_count
          @gc_count = count
          @ended = 0
        end
        @ended += 1
        return if @ended < STACKS_PER_GC || @ended < @live

        GC.start(full_mark: false)
        @gc_count = GC.count
        @ended = 0
        nil
      end
    end

    # The task whose fiber is running (or which resumed the running fiber),
    # or nil.
    # @return [Evix::Task, nil]
    def self.current
      Thread.current[:evix_task]
    end

    # @return [String]
    def inspect
      "#<#{self.class}:#{format("%#x", object_id)} #{@state} #{@fiber.inspect}>"
    end

    private

    # Runs the loop until the task is done or +timeout+ passes; with nothing
    # referenced left a post from another thread may still come, so wait in
    # short slices.
    def drive_loop(timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout if timeout
      while alive?
        left = deadline && (deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC))
        break if left&.negative?

        slice = @loop.alive? ? left : [left || 0.1, 0.1].min
        @loop.run_once(slice)
      end
    end

    # Parks the calling task on its own loop (+loop+, which may be another
    # loop's, on any thread) until #finish wakes it. A task that ends on
    # another thread between the alive? check and the entry going in is
    # seen by the second check, and the waiter wakes itself.
    def wait_in_fiber(loop, timeout)
      entry = nil
      while alive? && entry.nil?
        loop.suspend(timeout) do |token|
          (@waiting ||= []) << (entry = [loop, token])
          loop.resume(token) unless alive?
        end
      end
    ensure
      @waiting&.delete(entry)
    end

    # Ends the wait of a task parked in #wait_in_fiber: on this loop at
    # once, on another one by a post (from any thread).
    def wake_waiter(loop, token)
      return loop.resume(token) if loop.equal?(@loop)

      loop.post { loop.resume(token) }
    rescue ClosedError
      nil # that loop was closed: its task is gone
    end

    def run(block)
      Thread.current[:evix_task] = self
      @state = :running
      finish(:done, block.call, nil)
    rescue CancelledError => e
      finish(:cancelled, nil, e)
    rescue Exception => e # rubocop:disable Lint/RescueException -- surfaced through #wait, on_finish or run
      raise unless finish(:failed, nil, e)
    ensure
      Task.fiber_ended
    end

    # Records the outcome, wakes the waiters and tells the on_finish
    # callback; true if any waited or the callback took the outcome.
    #
    # The fiber goes: Ruby frees the stack of a fiber that ended after a
    # transfer only with the Fiber object itself, so a finished task that
    # kept it would hold its stack (and two memory mappings) for as long as
    # the task is referenced.
    def finish(state, value, error)
      @state = state
      @fiber = nil
      @value = value
      @error = error
      waiting = @waiting
      @waiting = nil
      waiting&.each { |loop, token| wake_waiter(loop, token) }
      waited = waiting && !waiting.empty?
      handled = @on_finish&.call(self, waited ? nil : error)
      waited || handled ? true : false
    end
  end
end
