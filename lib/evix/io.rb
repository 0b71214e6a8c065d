# frozen_string_literal: true

require "English"
require "io/wait"

module Evix
  # A non-blocking IO driven by a loop, for code running in an Evix::Task.
  # Every operation tries the system call first and waits (Loop#wait_io)
  # only when the kernel says it would block. Closing the IO (#close, or
  # IO#close on it) ends every wait on it with Evix::ClosedError.
  #
  # Timeouts (the default one and each +timeout:+) are nil (no limit) or a
  # finite, non-negative Numeric number of seconds; anything else raises at
  # the call (ArgumentError, TypeError), even when no wait was needed.
  #
  # Input is buffered: #gets and the other reads hand out a buffer that one
  # system call filled with up to CHUNK bytes. Output is not: #write (and
  # #puts, #print, #<<) returns when the kernel has every byte, so no flush
  # is needed. Only #try_write queues, and only what the kernel does not take
  # at once; the loop writes that queue in the background, and #flush waits
  # for it.
  #
  # One class, one job per file:
  # - io.rb: the object itself: what it wraps, its timeouts, closing, addresses;
  # - io_raw.rb: raw I/O and waiting: one system call to read or write, and
  #   the wait on the loop when the kernel says it would block;
  # - io_input.rb: buffering and line reading (#read, #gets, #readpartial...);
  # - io_output.rb: whole writes (#write, #puts...) and #try_write's queue.
  class IO
    # Bytes one read asks the kernel for.
    CHUNK = 16 * 1024
    EMPTY = "".b.freeze
    private_constant :EMPTY

    # @return [Numeric, nil] seconds each operation may wait (nil: no limit)
    attr_reader :timeout

    # @return [::IO] the wrapped IO
    attr_reader :io

    # @return [Evix::Timer, nil] restarted on every read that gets data
    attr_accessor :idle_timer

    # @param loop [Evix::Loop]
    # @param io [::IO, OpenSSL::SSL::SSLSocket] an open IO; it is switched to
    #   non-blocking mode. Over an SSLSocket reads and writes are TLS (see
    #   Evix::TLS::Stream; its handshake: #accept_tls or #connect_tls).
    # @param timeout [Numeric, nil] default per-operation timeout in seconds
    # @param write_high_water [Integer] bytes #try_write may queue (see there)
    # @raise [ArgumentError] a negative, NaN or infinite timeout, a negative
    #   write_high_water
    # @raise [TypeError] +io+ is not an IO
    # @raise [Evix::ClosedError] +io+ is closed
    def initialize(loop, io, timeout: nil, write_high_water: WRITE_HIGH_WATER)
      raise TypeError, "io must be an IO (got #{io.inspect})" unless io.respond_to?(:to_io)

      check_timeout(timeout)
      @write_high_water = IO.high_water(write_high_water)
      raise ClosedError, "IO is closed" if io.to_io.closed?

      @loop = loop
      @io = io.to_io
      # Over an SSLSocket OpenSSL moves the bytes and @io, its TCP socket, is
      # waited on (lib/evix/tls.rb). An ::IO is none: no look-up of OpenSSL,
      # which would load it where net/http left an autoload for it.
      if !io.is_a?(::IO) && defined?(::OpenSSL::SSL::SSLSocket) && io.is_a?(::OpenSSL::SSL::SSLSocket)
        @ssl_socket = io
        extend TLS::Stream
      end
      @timeout = timeout
      # Sockets are read and written by recv/send in the extension
      # (read_socket, write_socket); other IOs by Ruby's *_nonblock methods.
      @socket = @io.is_a?(::BasicSocket)
      @scratch = loop.read_buffer unless @socket
      # Input read but not handed out yet: the bytes of @buffer from @offset
      # on. An empty @buffer is the one way of having nothing buffered.
      @buffer = String.new(encoding: Encoding::BINARY)
      @offset = 0
      # What #try_write queued (nil: nothing), the watcher that writes it,
      # and the error that stopped that watcher.
      @outbox = nil
      @drainer = nil
      @write_error = nil
      # The fiber waiting to read, the usual lone waiter; any further
      # readers go in @readers. #close_read ends their waits.
      @reader = nil
      @readers = []
      @eof = false
      @arrived = false # after close_read: the kernel may still hold input that arrived
      @streak = 0 # see read_chunk
      @thread = Thread.current
    end

    # Sets the default timeout of every operation.
    # @param seconds [Numeric, nil] nil: no limit
    # @return [Numeric, nil] +seconds+
    # @raise [ArgumentError] a negative, NaN or infinite number
    # @raise [TypeError] not a Numeric
    def timeout=(seconds)
      check_timeout(seconds)
      @timeout = seconds
    end

    # Makes reads return what has arrived and then nil, without closing:
    # what is buffered, then what the kernel already holds (read without
    # waiting); the first read that finds nothing more is end of file, and
    # so is every read after it. Fibers waiting to read wake to take what is
    # there. Writes still work; a later #close ends the output (a socket's
    # SHUT_WR) before closing, so a peer whose late bytes go unread sees end
    # of file, not a reset. Evix::Server#shutdown drains with it.
    # @return [nil]
    def close_read
      @arrived = true unless @eof
      @eof = true
      [@reader, *@readers].each { |fiber| @loop.interrupt(fiber, EndOfReads.new) if fiber }
      nil
    end

    # Closes the IO; fibers waiting on it raise Evix::ClosedError. Idempotent.
    # From another thread the close is posted to the loop's thread.
    # @return [nil]
    def close
      return if @io.closed?

      unless Thread.current == @thread
        @loop.post { close }
        return
      end

      @idle_timer&.cancel
      @buffer = +EMPTY
      @offset = 0
      drop_outbox
      @loop.release_io(@io) unless @loop.closed?
      end_output if @eof
      @io.close
      nil
    end

    # @return [Boolean] whether the wrapped IO is closed
    def closed?
      @io.closed?
    end

    # @return [Integer] the wrapped IO's file descriptor
    # @raise [IOError] once closed
    def fileno
      @io.fileno
    end

    # The address of the other end (BasicSocket#remote_address), read once
    # and kept: it stays known after the peer resets the connection.
    # @return [Addrinfo, nil] nil for an IO that is not a socket
    # @raise [Evix::ClosedError] once closed
    def remote_address
      check_open
      @remote_address ||= (@io.remote_address if @socket)
    end

    # The address of this end (BasicSocket#local_address).
    # @return [Addrinfo, nil] nil for an IO that is not a socket
    # @raise [Evix::ClosedError] once closed
    def local_address
      check_open
      @local_address ||= (@io.local_address if @socket)
    end

    private

    def check_open
      raise ClosedError, "IO is closed" if @io.closed?
    end

    # After #close_read: end of file for the peer first (FIN), so that input
    # that arrives after the last read makes the close's reset come after
    # it, not in its place. Not for a socket that is not connected.
    def end_output
      @io.shutdown(::Socket::SHUT_WR) if @socket
    rescue SystemCallError
      nil
    end

    # Raises unless +timeout+ is nil or a number of seconds the loop can
    # wait (Arguments.seconds); the message shows the value as given. A
    # per-call timeout equal to the +default+ one was checked when that was
    # set. (#read and #write make that test inline: no method call without a
    # timeout.)
    def check_timeout(timeout, default = nil)
      Arguments.seconds(timeout, "timeout") unless timeout.nil? || timeout == default
    end
  end
end

require_relative "io_raw"
require_relative "io_input"
require_relative "io_output"
