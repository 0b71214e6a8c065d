# frozen_string_literal: true

module Evix
  # evix's only changes to Ruby's ::IO, in one place, prepended when the first
  # Evix::Loop is created (never at require):
  #
  # - IO#close tells the loops that registered the descriptor, in any thread,
  #   so every wait on it ends (IOError under Evix.run, Evix::ClosedError in
  #   Evix::IO and Loop#wait_io) instead of parking forever; and the closing
  #   thread's scheduler drops the registration while the fd is still open
  #   (after the close, a file kept open elsewhere, by a dup or a forked
  #   child, would leave one behind that only a rebuild of the epoll set
  #   removes).
  # - IO#reopen puts another file under the same IO object and fd number, so
  #   the loops stop trusting registrations pinned to that object.
  # - On a Ruby whose TCPSocket.new races addresses itself (Happy Eyeballs
  #   v2, Ruby 3.4: Socket.tcp_fast_fallback), TCPSocket.new inside
  #   Evix.run connects without it, unless the caller passes fast_fallback:.
  #   That code resolves names in its own threads and waits for them by
  #   blocking the thread, never through the scheduler's address_resolve,
  #   so it would stall the whole loop while a name resolves.
  module IOPatches
    # Prepended to ::IO.
    module Closing
      # @return [nil]
      def close
        Evix::Loop.io_closing(self)
        scheduler = Fiber.scheduler
        scheduler.release(self) if scheduler.is_a?(Scheduler) && !closed? && autoclose?
        super
      end

      # @return [::IO]
      def reopen(...)
        Evix::Loop.io_reopened
        super
      end
    end

    # Prepended to ::TCPSocket where Ruby has Socket.tcp_fast_fallback.
    module NoFastFallback
      # TCPSocket.new: +fast_fallback: false+ under an Evix::Scheduler of this
      # process, unless the caller passed +fast_fallback:+ itself.
      # @param args [Array] TCPSocket.new's arguments
      # @param options [Hash] its keywords
      def initialize(*args, **options)
        options[:fast_fallback] = false if !options.key?(:fast_fallback) && NoFastFallback.evix_scheduler?
        super
      end

      # Whether this thread's scheduler is an Evix::Scheduler of this process.
      # @api private
      # @return [Boolean]
      def self.evix_scheduler?
        scheduler = Fiber.scheduler
        scheduler.is_a?(Scheduler) && !scheduler.inherited?
      end
    end

    @installed = false

    # Prepends the patches to ::IO (and ::TCPSocket) once.
    # @return [nil]
    def self.install
      return if @installed

      @installed = true
      ::IO.prepend(Closing)
      ::TCPSocket.prepend(NoFastFallback) if defined?(::TCPSocket) && ::Socket.respond_to?(:tcp_fast_fallback)
      nil
    end
  end
end
