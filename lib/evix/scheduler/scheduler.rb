# frozen_string_literal: true

require "English"
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
    include BufferHooks

    # @return [Evix::Nursery] the scheduled fibers' tasks
    attr_reader :nursery

    # @param loop [Evix::Loop, nil] an existing loop; by default the scheduler
    #   creates one and closes it in #close. Its loop belongs to the thread
    #   that first uses it (the one the scheduler is installed on).
    # @param cancel_timeout [Numeric] seconds cancelled fibers get to run
    #   their ensure blocks (see Evix::Nursery)
    def initialize(loop = nil, cancel_timeout: 5)
      @owns_loop = loop.nil?
      attach(loop || Loop.new, @owns_loop)
      @nursery = Nursery.new(self.loop, cancel_timeout: cancel_timeout,
                                        woken_from_outside: method(:woken_from_outside?))
      @pid = Process.pid
    end

    # @return [Integer] scheduled fibers that have not finished
    def fibers
      @nursery.size
    end

    # Fiber::Scheduler hook: starts the block now in a new Evix::Task.
    # @return [Fiber]
    def fiber(&)
      # In a child forked inside Evix.run the loop is the parent's: the
      # fiber runs now, its waits blocking the thread (see #inherited?).
      return Fiber.new(blocking: false, &).tap(&:resume) if inherited?

      @nursery.spawn_fiber(&)
    end

    # Runs the block in a new task of the scheduler's loop, started on the
    # loop's next tick like Loop#spawn, and one of the scheduler's fibers, so
    # #run (the end of Evix.run) waits for it. Evix::Barrier#async uses it
    # under Evix.run.
    # @param on_finish [#call, nil] see Evix::Task#initialize
    # @return [Evix::Task]
    def spawn(on_finish: nil, &block)
      raise ArgumentError, "spawn requires a block" unless block

      @nursery.spawn(now: false, on_finish: on_finish, &block)
    end

    # Runs the loop until every scheduled fiber has finished (see
    # Evix::Nursery#drive).
    # @return [nil]
    def run
      @nursery.drive
    end

    # Fiber::Scheduler hook (Fiber.set_scheduler(nil), thread exit), or
    # called directly (then it also uninstalls the scheduler): runs the
    # remaining fibers to completion (cancelling them first when the thread
    # is being killed), closes the loop it created, and raises the first
    # exception a fiber left unhandled (see Evix::Nursery), or Evix::Error
    # if fibers wait and nothing can wake them. When an exception is already
    # on its way out (a thread ending with one, or close called in a
    # rescue), that one is raised instead, with the scheduler's failure in
    # its #suppressed and printed as a warning. Raises Evix::Error from one of the
    # scheduler's own fibers, which could never finish.
    # @return [nil]
    def close
      # A child forked inside Evix.run inherits this scheduler: its fibers
      # and loop belong to the parent, so the child leaves them alone.
      return if inherited? || @closed
      if Task.current&.loop.equal?(loop)
        raise Error, "cannot close an Evix::Scheduler (or unset it) from one of its own fibers"
      end

      @closed = true
      unwinding = $ERROR_INFO # before the loop runs fibers, which may reset it
      begin
        @nursery.cancel_all("the thread is being killed") if Thread.current.status == "aborting"
        run
        unwinding ? keep_unwinding(unwinding) : @nursery.raise_failure
      ensure
        loop.close if @owns_loop && !loop.closed?
        Fiber.set_scheduler(nil) if Fiber.scheduler.equal?(self)
      end
      nil
    end

    # #close while +error+ propagates: the nursery's failure must not hide
    # it. It is raised again (running the fibers may have cleared $!, and a
    # thread whose close returns then ends as if nothing was raised).
    def keep_unwinding(error)
      failure = @nursery.failure
      return if failure.nil? || failure.equal?(error)

      error.extend(Suppressed) unless error.is_a?(Suppressed)
      error.suppressed << failure
      warn "evix: #{failure.class}: #{failure.message} (while #{error.class} ended the thread)"
      raise error
    end
    private :keep_unwinding

    # @return [Boolean] whether this process only inherited the scheduler
    #   through fork (its loop and fibers belong to the parent)
    def inherited?
      Process.pid != @pid
    end

    # Forgets +io+'s registration before it is closed (see IOPatches::Closing).
    # @api private
    # @return [nil]
    def release(io)
      loop.release_io(io)
      nil
    rescue Error # closed, or inherited across fork: nothing registered here
      nil
    end

    # The Fiber::Scheduler hooks #kernel_sleep(duration = nil),
    # #block(blocker, timeout = nil), #unblock(blocker, fiber),
    # #io_wait(io, events, timeout = nil),
    # #io_read(io, buffer, length, offset = 0) and
    # #io_write(io, buffer, length, offset = 0) are native, in
    # ext/evix/src/ruby/scheduler.rs: a hook written in Ruby would leave a VM
    # re-entry on the machine stack of every fiber parked in it. So are
    # #loop (the Evix::Loop the scheduler runs on) and the waiting state
    # #unblock uses, kept in the native object. Their YARD comments are in
    # docs/api/native.rb.

    # Whether a fiber parked in #block or #kernel_sleep may still be woken
    # from outside the loop (the nursery's deadlock check): one sleeps
    # without a duration (as without a scheduler, a sleep for ever is not a
    # deadlock), or one waits on a Mutex, Queue, ConditionVariable or
    # Thread#join while another thread lives that may release it (evix's
    # own idle threads, named "evix ...", cannot).
    def woken_from_outside?
      blockers, sleepers = waits_by_kind
      sleepers.positive? ||
        (blockers.positive? && Thread.list.any? { |t| !t.equal?(Thread.current) && t.alive? && !evix_thread?(t) })
    end
    private :woken_from_outside?

    def evix_thread?(thread)
      thread.name&.start_with?("evix ")
    end
    private :evix_thread?

    # Fiber::Scheduler hook (Process.wait and friends), on the offload pool.
    # @param pid [Integer] as Process.wait takes it (-1: any child)
    # @param flags [Integer] Process::WNOHANG, Process::WUNTRACED
    # @return [Process::Status]
    def process_wait(pid, flags)
      # A blocking fiber: Ruby calls no hook from it (a forked child's wait).
      return Fiber.new(blocking: true) { Process::Status.wait(pid, flags) }.resume if inherited?

      loop.offload { Process::Status.wait(pid, flags) }
    end

    # Fiber::Scheduler hook (name resolution), on the offload pool.
    # @param hostname [String] a name or address ("[::1]" and a "%zone" are allowed)
    # @return [Array<String>] addresses
    def address_resolve(hostname)
      host = hostname.delete_prefix("[").delete_suffix("]").sub(/%.*\z/, "")
      loop.offload { Addrinfo.getaddrinfo(host, nil, nil, :STREAM).map(&:ip_address).uniq }
    end

    # Fiber::Scheduler hook (Timeout.timeout): raises +exception+ in the fiber
    # if the block is still running after +duration+.
    # @param duration [Numeric] seconds
    # @param exception [Class] what to raise
    # @param arguments [Array] its arguments (the message)
    # @yieldparam duration [Numeric]
    # @return [Object] the block's value
    def timeout_after(duration, exception = Timeout::Error, *arguments, &)
      return timeout_in_thread(duration, exception, *arguments, &) if inherited?

      fiber = Fiber.current
      timer = loop.add_timer(duration) { fiber.raise(exception, *arguments) if fiber.alive? }
      yield duration
    ensure
      timer&.cancel
    end

    # Timeout.timeout in a child forked inside Evix.run, without the loop:
    # a thread raises into the caller, as Ruby's own Timeout does.
    def timeout_in_thread(duration, exception, *arguments)
      caller = Thread.current
      watcher = Thread.new do
        sleep duration
        caller.raise(exception, *arguments)
      end
      yield duration
    ensure
      watcher&.kill
    end
    private :timeout_in_thread

    if Interface::SELECT_AND_PREAD
      # Fiber::Scheduler hook (IO.select, Ruby >= 3.3). Ruby passes only the
      # arguments IO.select was given (IO.select([r]) calls
      # io_select(readables)), so all but the first are optional. A select
      # on one IO waits in the loop like #io_wait (so closing the IO ends it
      # with IOError); one on several IOs runs on the offload pool.
      # @param readables [Array<::IO>, nil]
      # @param writables [Array<::IO>, nil]
      # @param exceptables [Array<::IO>, nil]
      # @param timeout [Numeric, nil] seconds; nil: no limit
      # @return [Array, nil] like IO.select
      def io_select(readables, writables = nil, exceptables = nil, timeout = nil)
        ready = select_now(readables, writables, exceptables)
        return ready if ready || timeout&.zero?

        interests = select_interests(readables, writables, exceptables)
        return loop.offload { ::IO.select(readables, writables, exceptables, timeout) } unless interests.size == 1

        io, events = interests.first
        deadline = timeout && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout)
        while true # rubocop:disable Style/InfiniteLoop -- Kernel#loop adds a C frame
          left = deadline && [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max
          return nil unless io_wait(io, events, left)

          ready = select_now(readables, writables, exceptables)
          return ready if ready
        end
      end

      # IO.select with a zero timeout, in a blocking fiber (where Ruby does
      # not call io_select).
      def select_now(readables, writables, exceptables)
        Fiber.blocking { ::IO.select(readables, writables, exceptables, 0) }
      end

      # { io => IO::READABLE | IO::WRITABLE | IO::PRIORITY bits }
      def select_interests(readables, writables, exceptables)
        interests = Hash.new(0).compare_by_identity
        [[readables, ::IO::READABLE], [writables, ::IO::WRITABLE], [exceptables, ::IO::PRIORITY]].each do |ios, bit|
          ios&.each { |io| interests[::IO.try_convert(io) || io] |= bit }
        end
        interests
      end
      private :select_now, :select_interests
    end

    # blocking_operation_wait (Ruby >= 3.4) is not defined. Ruby hands it an
    # opaque job for every blocking region it marks offload-safe: IO#close,
    # File.open, File.stat, ... all of which it would turn into a trip
    # through a pool thread (several times dearer each: docs/performance.md
    # has the figures), with no way to tell the rare long
    # one from the many short ones. Without it Ruby runs them in the fiber's
    # thread, as 3.1 and 3.3 do.

    # Fiber::Scheduler hook (Ruby >= 4.0: IO#close interrupts the fibers
    # waiting on that IO with it), safe from any thread: raises +exception+
    # in +fiber+ if it is still parked on the loop when the loop's thread
    # gets to it; a fiber that has left its wait meanwhile (the close
    # already ended it) is left alone. Ruby 4.1 may pass another object
    # standing for the fiber: it is sent #raise(exception), as Fiber#raise.
    # @param fiber [Fiber, #raise]
    # @param exception [Exception]
    # @return [nil]
    def fiber_interrupt(fiber, exception)
      loop.post do
        if fiber.is_a?(Fiber)
          interrupt_parked(fiber, exception) # native: only if it is parked on the loop
        elsif fiber.respond_to?(:raise)
          fiber.raise(exception)
        end
      end
      nil
    rescue Error # the loop is closed, or belongs to the parent of this forked process
      nil
    end

    # Fiber::Scheduler hook (Ruby >= 4.0): lets the loop run everything
    # else that is ready, then goes on (a zero sleep).
    # @return [nil]
    def yield
      kernel_sleep(0)
      nil
    end

    # Fiber::Scheduler hook (Ruby >= 4.0), before Ruby closes +descriptor+: the loop
    # forgets its registration while the fd is open and ends the waits on
    # it, as IO#close does in every loop (IOPatches). Ruby closes the fd.
    # @param descriptor [Integer, ::IO]
    # @return [nil]
    def io_close(descriptor)
      release(descriptor)
      nil
    end

    if Interface::SINGLE_TRANSFER
      alias io_read io_read_once
      alias io_write io_write_once
      alias io_pread io_pread_once
    end
  end
end
