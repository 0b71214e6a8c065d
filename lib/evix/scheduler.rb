# frozen_string_literal: true

require "socket"
require_relative "buffer_hooks"

module Evix
  # Ruby's Fiber::Scheduler on an Evix::Loop: inside Fiber.schedule (or
  # Evix.run) plain IO, sleep, Queue, Mutex, Timeout, Net::HTTP and
  # Process.wait suspend only the calling fiber.
  #
  # Every hook suspends with Fiber.yield and is resumed by a loop callback;
  # the loop runs in the scheduler's thread, in #run and #close.
  class Scheduler
    # How long #run blocks while every fiber waits on another thread.
    IDLE_POLL = 1.0

    # Guards the list of open schedulers (see Scheduler.io_closed).
    OPEN_LOCK = Thread::Mutex.new
    private_constant :OPEN_LOCK
    @open = [].freeze

    class << self
      # Tells every open Scheduler, in any thread, that +io+ is being closed
      # (ClosingIO calls this from IO#close), so that the fibers waiting on it
      # wake with IOError. A list written once per scheduler, never per wait.
      # (Not an ObjectSpace::WeakMap: Ruby 3.1's WeakMap#keys can return a
      # scheduler the GC has already freed.)
      # @api private
      # @return [nil]
      def io_closed(io)
        @open.each { |scheduler| scheduler.io_closed(io) }
        nil
      end

      # Adds +scheduler+ to the open schedulers (Scheduler#initialize), or
      # removes it (Scheduler#close). The list is replaced, never changed in
      # place, so io_closed, in any thread, iterates it without the lock.
      # @api private
      # @return [nil]
      def track(scheduler, open)
        OPEN_LOCK.synchronize { @open = (open ? [*@open, scheduler] : @open.reject { |s| s.equal?(scheduler) }).freeze }
        nil
      end
    end

    include BufferHooks

    # @return [Evix::Loop] the loop the scheduler runs on
    attr_reader :loop

    # @param loop [Evix::Loop, nil] an existing loop; by default the scheduler
    #   creates one and closes it in #close
    def initialize(loop = nil)
      @loop = loop || Loop.new
      @owns_loop = loop.nil?
      @fibers = 0
      @blocked = {}.compare_by_identity
      # IO => the Fiber waiting on it, or an Array of them when several do.
      @io_waiters = {}.compare_by_identity
      @pid = Process.pid
      setup_buffer_hooks
      Scheduler.track(self, true)
    end

    # @return [Integer] scheduled fibers that have not finished
    attr_reader :fibers

    # Fiber::Scheduler hook: creates a non-blocking fiber and starts it now.
    # @return [Fiber]
    def fiber(&block)
      fiber = Fiber.new(blocking: false) do
        block.call
      ensure
        @fibers -= 1
      end
      @fibers += 1
      fiber.resume
      fiber
    end

    # Runs the loop until every scheduled fiber has finished.
    # @return [nil]
    def run
      @loop.run_once(@loop.alive? ? nil : IDLE_POLL) while @fibers > 0 # rubocop:disable Style/NumericPredicate -- no method call
      nil
    end

    # Fiber::Scheduler hook (Fiber.set_scheduler(nil), thread exit): runs
    # the remaining fibers to completion, then closes the loop it created.
    # @return [nil]
    def close
      # A child forked inside Evix.run inherits this scheduler: its fibers
      # and loop belong to the parent, so the child leaves them alone.
      return if inherited?

      begin
        run unless @abandoned
      ensure
        Scheduler.track(self, false)
        @loop.close if @owns_loop && !@loop.closed?
      end
    end

    # @return [Boolean] whether this process only inherited the scheduler
    #   through fork (its loop and fibers belong to the parent)
    def inherited?
      Process.pid != @pid
    end

    # Makes #close skip running the remaining fibers.
    def abandon
      @abandoned = true
    end

    # Forgets +io+'s registration before it is closed (see ClosingIO).
    # @api private
    # @return [nil]
    def release(io)
      @loop.release_io(io)
      nil
    rescue Error # closed, or inherited across fork: nothing registered here
      nil
    end

    # Wakes the fibers waiting on +io+ with IOError; IO#close calls this,
    # from any thread, before the descriptor goes away.
    # @api private
    def io_closed(io)
      waiting = @io_waiters[io]
      return unless waiting

      fibers = waiting.is_a?(Array) ? waiting.dup : [waiting]
      @loop.post { fibers.each { |fiber| fiber.resume(:closed) if fiber.alive? && waits_on?(io, fiber) } }
    rescue Error # closed, or inherited across fork: nobody here waits
      nil
    end

    # The Fiber::Scheduler hooks #kernel_sleep(duration = nil),
    # #block(blocker, timeout = nil), #io_wait(io, events, timeout = nil),
    # #io_read(io, buffer, length, offset = 0) and
    # #io_write(io, buffer, length, offset = 0) are C methods, in
    # ext/evix/src/ruby/scheduler.rs: a hook written in Ruby would leave a VM
    # re-entry on the machine stack of every fiber parked in it. Those that
    # wait note the fiber in @blocked (sleep, block) or @io_waiters (IO), for
    # #unblock and #io_closed.

    # Fiber::Scheduler hook; may be called from any thread.
    # @return [nil]
    def unblock(_blocker, fiber)
      @loop.post { wake(fiber, true) }
      nil
    rescue ClosedError
      nil
    end

    # Fiber::Scheduler hook (Process.wait and friends), on the offload pool.
    # @return [Process::Status]
    def process_wait(pid, flags)
      @loop.offload { Process::Status.wait(pid, flags) }
    end

    # Fiber::Scheduler hook (name resolution), on the offload pool.
    # @return [Array<String>] addresses
    def address_resolve(hostname)
      host = hostname.delete_prefix("[").delete_suffix("]").sub(/%.*\z/, "")
      @loop.offload { Addrinfo.getaddrinfo(host, nil, nil, :STREAM).map(&:ip_address).uniq }
    end

    # Fiber::Scheduler hook (Timeout.timeout): raises +exception+ in the fiber
    # if the block is still running after +duration+.
    def timeout_after(duration, exception = Timeout::Error, *arguments)
      fiber = Fiber.current
      timer = @loop.add_timer(duration) { fiber.raise(exception, *arguments) if fiber.alive? }
      yield duration
    ensure
      timer&.cancel
    end

    if RUBY_VERSION >= "3.3"
      # Fiber::Scheduler hook (IO.select, Ruby >= 3.3), on the offload pool.
      # @return [Array, nil] like IO.select
      def io_select(readables, writables, exceptables, timeout)
        @loop.offload { ::IO.select(readables, writables, exceptables, timeout) }
      end
    end

    if RUBY_VERSION >= "3.4"
      # Fiber::Scheduler hook (Ruby >= 3.4): blocking C work on the offload pool.
      def blocking_operation_wait(work)
        @loop.offload { work.call }
      end
    end

    if RUBY_VERSION >= "3.5"
      # Fiber::Scheduler hook (Ruby >= 3.5): raises +exception+ in +fiber+.
      # @return [nil]
      def fiber_interrupt(fiber, exception)
        @loop.post { fiber.raise(exception) if fiber.alive? }
        nil
      end
    end

    # Prepended to ::IO: closing an IO wakes the fibers waiting on it, and
    # the closing thread's scheduler drops the fd's kernel registration while
    # the fd is still open (after the close, a file kept open elsewhere, by a
    # dup or a forked child, would leave one behind that only a rebuild of the
    # epoll set removes).
    module ClosingIO
      # @return [nil]
      def close
        Scheduler.io_closed(self)
        scheduler = Fiber.scheduler
        scheduler.release(self) if scheduler.is_a?(Scheduler) && !closed? && autoclose?
        super
      end
    end
    ::IO.prepend(ClosingIO)

    private

    def waits_on?(io, fiber)
      waiting = @io_waiters[io]
      fiber.equal?(waiting) || (waiting.is_a?(Array) && waiting.any? { |other| other.equal?(fiber) })
    end

    def wake(fiber, value)
      fiber.resume(value) if @blocked.key?(fiber)
    end
  end
end
