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
  # Not thread-safe: like the loop, it belongs to the loop's thread. A wake
  # from another thread raises Evix::Error before it changes anything, so
  # no waiter is lost (see #shift).
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
        @thread = Thread.current
      end

      # @return [Boolean] whether it was parked by a loop of the calling thread
      def local?
        @thread.equal?(Thread.current)
      end

      # Ends the wait with +value+.
      # @param value [Object] what the waiter's #wait returns
      # @return [Boolean] false if the wait had already ended, or can never
      #   end because its loop was closed
      def resume(value)
        !@loop.closed? && @loop.resume(@token, value)
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
      @elsewhere = "#{what.split("#").first} has tasks waiting on a loop of another thread: " \
                   "wake them from that thread (loop.post { })"
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
    # @raise [Evix::Error] the first entry waits on another thread's loop
    #   (nothing changed)
    def shift
      waiter, = @waiters.first
      return unless waiter
      raise Error, @elsewhere unless waiter.local?

      @waiters.delete(waiter)
      waiter
    end

    # Raises unless every entry waits on a loop of the calling thread: what
    # a caller that changes its own state before waking checks first.
    # @return [nil]
    # @raise [Evix::Error] an entry waits on another thread's loop
    def check_local
      raise Error, @elsewhere unless @waiters.each_key.all?(&:local?)
    end

    # Ends the first wait still going on with +value+.
    # @param value [Object] what that waiter's #wait returns
    # @return [Boolean] whether a waiter was woken
    # @raise [Evix::Error] from another thread than the waiter's (nothing
    #   changed: a later wake on the right thread still reaches it)
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
    # @raise [Evix::Error] from another thread than a waiter's (nothing
    #   changed)
    def wake_all(value = nil)
      check_local
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
