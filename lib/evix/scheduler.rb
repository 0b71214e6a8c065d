# frozen_string_literal: true

require "socket"
require_relative "buffer_hooks"

module Evix
  # Ruby's Fiber::Scheduler on an Evix::Loop: inside Fiber.schedule (or
  # Evix.run) plain IO, sleep, Queue, Mutex, Timeout, Net::HTTP and
  # Process.wait suspend only the calling fiber.
  #
  # Every fiber it schedules is an Evix::Task; every hook parks the calling
  # fiber on the loop, which runs in the scheduler's thread, in #run and
  # #close.
  class Scheduler
    # How long #run blocks while every fiber waits on another thread.
    IDLE_POLL = 1.0

    include BufferHooks

    # @return [Evix::Loop] the loop the scheduler runs on
    attr_reader :loop

    # @param loop [Evix::Loop, nil] an existing loop; by default the scheduler
    #   creates one and closes it in #close
    def initialize(loop = nil)
      @loop = loop || Loop.new
      @owns_loop = loop.nil?
      @fibers = 0
      # Fiber => the token of its wait in #block or #kernel_sleep.
      @blocked = {}.compare_by_identity
      @pid = Process.pid
      setup_buffer_hooks
    end

    # @return [Integer] scheduled fibers that have not finished
    attr_reader :fibers

    # Fiber::Scheduler hook: creates a non-blocking fiber and starts it now.
    # @return [Fiber]
    def fiber(&block)
      @fibers += 1
      task = Task.new(@loop, start: true) do
        block.call
      ensure
        @fibers -= 1
      end
      task.fiber
    end

    # Runs the block in a new task of the scheduler's loop, started on the
    # loop's next tick like Loop#spawn, and counted among #fibers, so #run
    # (the end of Evix.run) waits for it. Evix::Barrier#async uses it under
    # Evix.run.
    # @param on_finish [#call, nil] see Evix::Task#initialize
    # @return [Evix::Task]
    def spawn(on_finish: nil, &block)
      raise ArgumentError, "spawn requires a block" unless block

      @fibers += 1
      # Counted down in on_finish, not in an ensure: a task cancelled
      # before it started never runs its block.
      finished = lambda do |task, error|
        @fibers -= 1
        on_finish ? on_finish.call(task, error) : false
      end
      Task.new(@loop, on_finish: finished, &block)
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

    # The Fiber::Scheduler hooks #kernel_sleep(duration = nil),
    # #block(blocker, timeout = nil), #io_wait(io, events, timeout = nil),
    # #io_read(io, buffer, length, offset = 0) and
    # #io_write(io, buffer, length, offset = 0) are C methods, in
    # ext/evix/src/ruby/scheduler.rs: a hook written in Ruby would leave a VM
    # re-entry on the machine stack of every fiber parked in it. #block and
    # #kernel_sleep note their wait's token in @blocked, for #unblock.

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
        @loop.post { @loop.interrupt(fiber, exception) if fiber.alive? }
        nil
      end
    end

    private

    def wake(fiber, value)
      token = @blocked[fiber]
      @loop.resume(token, value) if token
    end
  end
end
