# frozen_string_literal: true

require "English"
require "io/wait"
require_relative "io_input"
require_relative "io_output"

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
  # This file is the whole class: its state, raw I/O (one system call to read
  # or write, the wait on the loop when the kernel says it would block) and
  # closing. The input and output halves are modules it includes, each in a
  # file of its own (IOInput, IOOutput: modules, so that no other file
  # reopens the class), and ext/evix/src/ruby/io.rs holds its native private
  # methods. Over TLS the object is an Evix::TLS::Stream, a subclass.
  #
  # The raw reads and writes are every server's hot path: no method call or
  # allocation they can do without (docs/performance.md), and no Kernel#loop
  # (that C iterator would put two more pages of machine stack under every
  # parked fiber).
  class IO
    include IOInput
    include IOOutput

    # Full reads in a row before a read gives the other fibers a turn.
    FAIR_READS = 16
    # Ends the waits of the readers when #close_read comes (never escapes).
    class EndOfReads < Exception; end # rubocop:disable Lint/InheritException -- no rescue of StandardError may catch it
    private_constant :EndOfReads

    # @return [Numeric, nil] seconds each operation may wait (nil: no limit)
    attr_reader :timeout

    # @return [::IO] the wrapped IO
    attr_reader :io

    # @return [Evix::Timer, nil] restarted on every read that gets data
    attr_accessor :idle_timer

    # An Evix::TLS::Stream for an OpenSSL::SSL::SSLSocket, else an Evix::IO.
    # @param loop [Evix::Loop]
    # @param io [::IO, OpenSSL::SSL::SSLSocket]
    # @return [Evix::IO]
    # @raise [TypeError] an SSLSocket given to a subclass that is not a
    #   TLS::Stream (it would read and write the raw socket under TLS)
    def self.new(loop, io, **options)
      # No look-up of OpenSSL for an ::IO, which would load it where net/http
      # left an autoload for it.
      if !io.is_a?(::IO) && defined?(::OpenSSL::SSL::SSLSocket) && io.is_a?(::OpenSSL::SSL::SSLSocket) &&
         !(self <= TLS::Stream)
        return TLS::Stream.new(loop, io, **options) if equal?(IO)

        raise TypeError, "an OpenSSL::SSL::SSLSocket is wrapped by Evix::IO.new or a subclass of " \
                         "Evix::TLS::Stream (got #{name || inspect}.new)"
      end

      super
    end

    # +bytes+ if it is a valid write high-water mark (an Integer, not
    # negative); servers check theirs with it.
    # @api private
    # @param bytes [Integer]
    # @return [Integer] +bytes+
    # @raise [ArgumentError, TypeError] a negative or non-Integer number
    def self.high_water(bytes)
      unless bytes.is_a?(Integer)
        raise TypeError,
              "write_high_water must be an Integer number of bytes (got #{bytes.inspect})"
      end
      raise ArgumentError, "write_high_water must not be negative (got #{bytes})" if bytes.negative?

      bytes
    end

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

    # Waits until the IO is readable.
    # @param timeout [Numeric, nil]
    # @return [true]
    # @raise [Evix::TimeoutError] not readable within +timeout+ seconds
    # @raise [Evix::ClosedError] the IO is or gets closed
    def wait_readable(timeout: @timeout)
      wait(READ, timeout)
    end

    # Waits until the IO is writable.
    # @param timeout [Numeric, nil]
    # @return [true]
    # @raise [Evix::TimeoutError] not writable within +timeout+ seconds
    # @raise [Evix::ClosedError] the IO is or gets closed
    def wait_writable(timeout: @timeout)
      wait(WRITE, timeout)
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
    # wait (Arguments.seconds), for a call that may finish without a wait;
    # a wait checks its own (Loop#wait_io). A per-call timeout equal to the
    # +default+ one was checked when that was set.
    def check_timeout(timeout, default = nil)
      Arguments.seconds(timeout, "timeout") unless timeout.nil? || timeout == default
    end

    # The next chunk of input, a String of its own, or nil at end of file;
    # Evix::ClosedError on a closed IO (#read leaves that check to it). A
    # reset is the kernel's error (Errno::ECONNRESET), never an end of file:
    # a body cut short must not look complete.
    # After a short read the kernel buffer is most likely empty: wait first
    # instead of paying a read that fails with EAGAIN (the registration is
    # level-triggered, so data that is already there wakes the wait at once).
    # After FAIR_READS reads without a wait it waits too, so a peer that never
    # stops sending cannot keep the loop to itself. Both are one counter,
    # @streak: full reads since the last wait, set to FAIR_READS by a short
    # read.
    #
    # The instance variables @io and @streak are read once into locals (an
    # instance variable read costs more than a local one on Ruby 3.1), and
    # the lone reader's wait is written out instead of calling #wait.
    # rubocop:disable Metrics -- one method on purpose: each part split out would be a method call per read
    def read_chunk(maxlen, timeout)
      io = @io
      streak = @streak
      until @eof
        if streak >= FAIR_READS
          if @reader
            wait(READ, timeout)
          else
            begin
              @reader = Fiber.current
              outcome = @loop.wait_io(io, READ, timeout)
            rescue EndOfReads
              outcome = READ
            ensure
              @reader = nil
            end
            # Ready is exactly READ (the loop masks the ready bits with the
            # interest): a comparison, where is_a?(Integer) is a method call.
            finish_wait(timeout) unless outcome == READ
          end
          streak = 0
          next # close_read may have come while waiting
        end
        chunk = @socket ? read_socket(io, maxlen) : read_other(maxlen)
        # Symbol first: Symbol#== is a pointer comparison, String#== would ask the Symbol for #to_str.
        if :wait_readable == chunk # rubocop:disable Style/YodaCondition
          streak = FAIR_READS
          next
        end
        return unless chunk

        # #size, not #bytesize: the same on a binary String, and a VM instruction, not a method call.
        @streak = chunk.size < maxlen ? FAIR_READS : streak + 1
        @idle_timer&.again
        return chunk
      end
      raise ClosedError, "IO is closed" if io.closed?

      read_arrived(maxlen)
    rescue ::IOError
      raise ClosedError, "IO is closed" if @io.closed?

      raise
    end
    # rubocop:enable Metrics

    # After #close_read: what the kernel already holds, without waiting;
    # once a read finds nothing, end of file for good.
    def read_arrived(maxlen)
      return unless @arrived

      chunk = @socket ? read_socket(@io, maxlen) : read_other(maxlen)
      return chunk if chunk.is_a?(String)

      @arrived = false
      nil
    end

    # A read from an IO that is not a socket (a pipe, a tty, a file): into the
    # loop's scratch buffer, then a copy the size of what came.
    def read_other(maxlen)
      chunk = @io.read_nonblock(maxlen, @scratch, exception: false)
      chunk.is_a?(String) ? EMPTY + chunk : chunk
    end

    # The raw write: how many bytes of +data+ the kernel takes now, or
    # :wait_writable when it takes none. (#write has it written out.)
    def write_some(data)
      @socket ? write_socket(@io, data) : @io.write_nonblock(data, exception: false)
    end

    # Waits for +events+; on a closed IO wait_io raises Evix::ClosedError.
    # After close_read a wait to read returns at once (its timeout checked
    # here: no wait checks it).
    def wait(events, timeout)
      if @eof && events == READ && !@io.closed?
        check_timeout(timeout, @timeout)
        return true
      end

      reading = events.anybits?(READ)
      @readers << Fiber.current if reading
      begin
        outcome = @loop.wait_io(@io, events, timeout)
      rescue EndOfReads
        return true
      ensure
        @readers.delete(Fiber.current) if reading
      end
      outcome.nil? ? finish_wait(timeout) : true
    end

    # Waits until the kernel takes more of a write. Only the thread that
    # wrapped the IO may wait on the loop; another one waits by itself.
    def wait_to_write(timeout)
      return wait(WRITE, timeout) if Thread.current == @thread

      @io.wait_writable(timeout) or finish_wait(timeout)
    end

    # A wait that ended without readiness: the IO was closed, or it timed out.
    def finish_wait(timeout)
      raise ClosedError, "IO was closed while waiting" if @io.closed?

      raise TimeoutError, "IO operation timed out after #{timeout}s"
    end
  end
end
