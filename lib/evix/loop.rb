# frozen_string_literal: true

module Evix
  # Ruby-side additions to the Rust-defined Evix::Loop: fibers, IO wrappers
  # and signals (offload: offload.rb; stall reports: stall.rb).
  class Loop
    # Installs evix's patches to ::IO (see IOPatches) with the first loop.
    module Creating
      # @return [Evix::Loop]
      def new(...)
        IOPatches.install
        super
      end
    end
    singleton_class.prepend(Creating)

    # Runs the block in a new fiber driven by this loop.
    # @yieldreturn [Object] the task's value (Task#wait)
    # @return [Evix::Task]
    # @raise [ArgumentError] without a block
    def spawn(&block)
      raise ArgumentError, "spawn requires a block" unless block

      Task.new(self, &block)
    end

    # Wraps an IO for fiber-friendly, non-blocking use inside tasks (as
    # Evix::IO.new(self, io, ...)).
    # @param io [::IO, OpenSSL::SSL::SSLSocket] an open IO
    # @param timeout [Numeric, nil] default per-operation timeout in seconds
    # @param write_high_water [Integer] bytes Evix::IO#try_write may queue
    # @return [Evix::IO]
    # @raise (see Evix::IO#initialize)
    def wrap(io, timeout: nil, write_high_water: Evix::IO::WRITE_HIGH_WATER)
      Evix::IO.new(self, io, timeout: timeout, write_high_water: write_high_water)
    end

    # A scratch String that Evix::IO reads into before copying what arrived,
    # so a read allocates no buffer of its full size. One per loop: fibers of
    # a loop never read concurrently.
    # @api private
    # @return [String]
    def read_buffer
      @read_buffer ||= String.new(capacity: Evix::IO::CHUNK, encoding: Encoding::BINARY)
    end

    # Suspends the calling task for +seconds+.
    # @param seconds [Numeric] not negative
    # @return [nil]
    # @raise [Evix::Error] outside a task
    # @raise [ArgumentError, TypeError] a nil, negative or non-Numeric +seconds+
    def sleep(seconds)
      raise Error, "Evix::Loop#sleep must be called inside a task" unless Task.current
      raise ArgumentError, "seconds must not be nil" if seconds.nil?

      suspend(seconds)
      nil
    end

    # Runs the block on this loop, in a new task, whenever +signal+ arrives
    # (replacing this loop's earlier block for it). Other loops, on any
    # thread, may handle the same signal: each runs its own block.
    # @param signal [Symbol, String, Integer] :INT, "SIGINT", 2...
    # @yieldparam signo [Integer] the signal number
    # @return [Integer] the signal number
    # @raise [ArgumentError] an unknown signal, one Ruby reserves (SIGVTALRM...), no block
    # @raise [Errno::EINVAL] a signal that cannot be caught (SIGKILL, SIGSTOP)
    def add_signal(signal, &)
      ensure_usable!
      Signals.number(signal)
      raise ArgumentError, "add_signal requires a block" unless block_given?

      unless @signals
        @signals = Signals.new(self)
        reserve_fd(@signals.reader)
      end
      @signals.add(signal, &)
    end

    # Stops handling +signal+ on this loop. The last loop of the process to
    # stop handling it restores the handler that was there before evix.
    # The self-pipe stays open until #close: its read end is reserved as the
    # loop's own fd, which a new pipe could otherwise reuse.
    # @param signal [Symbol, String, Integer]
    # @return [Boolean] whether a handler was removed
    def remove_signal(signal)
      ensure_usable!
      return false unless @signals

      @signals.remove(signal)
    end

    # Whether a signal block of this loop may still run (its watcher is
    # unref'd, so #alive? does not count it): the nursery's deadlock check.
    # @return [Boolean]
    def handles_signals?
      !@signals.nil? && !@signals.empty?
    end
    private :handles_signals?

    # Restores signal handlers, then closes the loop. See the native #close.
    module Closing
      # @return [nil]
      def close
        super
        @signals&.close
        @signals = nil
        @stall_watch&.cancel # ends the watchdog thread (see stall.rb)
        @stall_watch = nil
      end
    end
    prepend Closing
  end
end
