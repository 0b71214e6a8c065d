# frozen_string_literal: true

module Evix
  # A FIFO of parked tasks: the one way Evix::Condition, Evix::Semaphore,
  # Evix::Queue and Evix::Barrier wait. A waiter parks on its task's loop
  # (Loop#suspend) with its token in the list; a waker shifts the first entry
  # and ends that wait with Loop#resume. A wait that already ended (timed out,
  # or cancelled and not yet unwound) makes resume return false: the waker
  # moves on to the next entry, so no wakeup is lost. A waiter that leaves
  # by timeout or exception takes its entry out itself.
  #
  # Not thread-safe: like the loop, it belongs to the loop's thread.
  class WaitList
    # One parked task: where to resume it, and what it brought (a pushed
    # item, for Evix::Queue).
    class Waiter
      # @return [Object] what the waiter brought
      attr_reader :payload

      # @param loop [Evix::Loop] the loop the waiter is parked on
      # @param token [Integer] its Loop#suspend token
      # @param payload [Object] what it brought
      def initialize(loop, token, payload)
        @loop = loop
        @token = token
        @payload = payload
      end

      # Ends the wait with +value+.
      # @param value [Object] what the waiter's #wait returns
      # @return [Boolean] false if the wait had already ended
      def resume(value)
        @loop.resume(@token, value)
      end
    end

    # Where a task runs, for the error messages.
    TASKS = "a task (loop.spawn { }, or Fiber.schedule { } and the block of Evix.run)"

    # The loop the calling task runs on.
    # @param message [String] the Evix::Error's message outside a task
    # @return [Evix::Loop]
    # @raise [Evix::Error] outside a task
    def self.current_loop(message)
      task = Task.current
      raise Error, message unless task

      task.loop
    end

    # @param what [String] names the waiting operation in the error raised
    #   outside a task, e.g. "Evix::Queue#pop"
    def initialize(what)
      @outside = "#{what} has to wait, which it can only do inside #{TASKS}"
      @waiters = {}.compare_by_identity # an ordered set: a waiter that leaves early costs O(1)
    end

    # Parks the calling task at the end of the list until a waker resumes it.
    # @param timeout [Numeric, nil] seconds to wait at most
    # @param payload [Object] kept with the entry for the waker (#shift)
    # @return [Object] the value the waker gave, nil on timeout
    # @raise [Evix::Error] outside a task
    def wait(timeout = nil, payload = nil)
      loop = WaitList.current_loop(@outside)
      waiter = nil
      loop.suspend(timeout) { |token| @waiters[waiter = Waiter.new(loop, token, payload)] = true }
    ensure
      # Woken: the waker took it out already. Timed out or interrupted: still in.
      @waiters.delete(waiter) if waiter
    end

    # Takes the first entry out, live or not; the caller resumes it.
    # @return [Waiter, nil]
    def shift
      @waiters.shift&.first
    end

    # Ends the first wait still going on with +value+.
    # @param value [Object] what that waiter's #wait returns
    # @return [Boolean] whether a waiter was woken
    def wake(value = nil)
      while (waiter = shift)
        return true if waiter.resume(value)
      end
      false
    end

    # Ends every wait in the list now with +value+ (not those that start
    # while they are woken). Called from outside a task, each waiter runs
    # inside its Loop#resume: one that then raises does not keep the others
    # from being woken; the first exception is raised once all are, with
    # any later ones in its #suppressed.
    # @param value [Object] what each waiter's #wait returns
    # @return [Integer] how many were woken
    def wake_all(value = nil)
      waiters = @waiters
      @waiters = {}.compare_by_identity
      woken = 0
      errors = nil
      waiters.each_key do |waiter|
        woken += 1 if waiter.resume(value)
      rescue Exception => e # rubocop:disable Lint/RescueException -- raised below, once every waiter is woken
        woken += 1
        (errors ||= []) << e
      end
      raise_first(errors) if errors

      woken
    end

    # @return [Boolean] whether no entry is in the list (one whose wait
    #   ended but which has not unwound yet counts until then)
    def empty?
      @waiters.empty?
    end

    # @return [Integer] entries in the list
    def size
      @waiters.size
    end

    private

    def raise_first(errors)
      first = errors.first
      if errors.size > 1
        first.extend(Suppressed) unless first.is_a?(Suppressed)
        first.suppressed.concat(errors.drop(1))
      end
      raise first
    end
  end
end
