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
  # The hot path (read, write, the wait between them) avoids method calls and
  # allocations it can do without, and has no Kernel#loop: that C iterator
  # would put two more pages of machine stack under every parked fiber.
  #
  # No flush is needed: #write (and #puts, #print, #<<) returns when the
  # kernel has every byte, and nothing is buffered in Ruby. Only #try_write
  # queues, and only what the kernel does not take at once; the loop writes
  # that queue in the background, and #flush waits for it (see io_output.rb).
  #
  # Input is buffered: #gets and the other reads hand out a buffer that one
  # system call filled with up to CHUNK bytes (see io_input.rb).
  class IO
    CHUNK = 16 * 1024
    # Full reads in a row before a read gives the other fibers a turn.
    FAIR_READS = 16
    EMPTY = "".b.freeze
    # Ends the waits of the readers when #close_read comes (never escapes).
    class EndOfReads < Exception; end # rubocop:disable Lint/InheritException -- no rescue of StandardError may catch it
    private_constant :EMPTY, :EndOfReads

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
      @streak = 0 # see read_chunk
      @thread = Thread.current
    end

    # Sets the default timeout of every operation.
    # @param seconds [Numeric, nil] nil: no limit
    # @raise [ArgumentError] a negative, NaN or infinite number
    def timeout=(seconds)
      check_timeout(seconds)
      @timeout = seconds
    end

    # Reads up to +maxlen+ bytes; nil at end of file.
    # @return [String, nil]
    def read(maxlen = CHUNK, timeout: @timeout)
      # A timeout equal to the default one was checked when it was set; with
      # no timeout this is one branch, no method call.
      check_timeout(timeout) if timeout && timeout != @timeout
      unless @buffer.empty?
        raise ArgumentError, "negative length #{maxlen} given" if maxlen.negative?
        raise ClosedError, "IO is closed" if @io.closed?

        return take(maxlen)
      end
      read_chunk(maxlen, timeout) # raises Evix::ClosedError itself
    end

    # Reads exactly +length+ bytes; nil at end of file before the first byte,
    # EOFError if the stream ends part way.
    # @param length [Integer] not negative
    # @return [String, nil]
    def read_exactly(length, timeout: @timeout)
      raise TypeError, "length must be an Integer (got #{length.inspect})" unless length.is_a?(Integer)
      raise ArgumentError, "negative length #{length} given" if length.negative?

      check_timeout(timeout, @timeout)
      check_open
      while @buffer.bytesize - @offset < length
        next if fill(timeout)
        return nil if @buffer.empty?

        raise EOFError, "end of file after #{@buffer.bytesize - @offset} of #{length} bytes"
      end
      take(length)
    end

    # Writes all of +data+, waiting whenever the kernel buffer is full; it
    # returns when the kernel has every byte (nothing to flush). On the
    # loop's thread, bytes #try_write queued are written first.
    #
    # Safe from a thread other than the one that wrapped the IO: the bytes go
    # out from the calling thread and, when the kernel buffer is full, that
    # thread waits (IO#wait_writable, or its own fiber scheduler) instead of
    # the loop, whose waits belong to its own thread. So the write ends as it
    # does on the loop's thread: all the data written, or the error of the
    # stream (Evix::TimeoutError, Evix::ClosedError, Errno::EPIPE...). Writes
    # from several threads (or fibers) at once may interleave; one writer at
    # a time keeps its data in order.
    # @return [Integer] bytes written
    def write(data, timeout: @timeout) # rubocop:disable Metrics/CyclomaticComplexity,Metrics/PerceivedComplexity
      check_timeout(timeout) if timeout && timeout != @timeout
      # What #try_write queued goes first (it belongs to the loop's thread).
      flush(timeout: timeout) if @outbox && Thread.current == @thread
      # write_nonblock writes the bytes whatever the encoding: no binary copy.
      data = data.to_s
      total = left = data.bytesize
      until data.empty?
        # #write_some, written out: a method call fewer on the echo path.
        written = @socket ? write_socket(@io, data) : @io.write_nonblock(data, exception: false)
        break if written == left # the usual case: the kernel took it all

        # Go on with the rest as a copy-on-write slice of our own: the caller
        # may change its string while this waits.
        written = 0 if written == :wait_writable
        left -= written
        data = data.byteslice(written, left)
        wait_to_write(timeout) if written.zero?
      end
      total
    rescue ::IOError
      raise ClosedError, "IO is closed" if @io.closed?

      raise
    end

    # Waits until the IO is readable. @return [true]
    def wait_readable(timeout: @timeout)
      check_timeout(timeout, @timeout)
      wait(READ, timeout)
    end

    # Waits until the IO is writable. @return [true]
    def wait_writable(timeout: @timeout)
      check_timeout(timeout, @timeout)
      wait(WRITE, timeout)
    end

    # Makes reads return what is buffered and then nil, without closing;
    # fibers waiting to read see end of file now. Writes still work.
    # @return [nil]
    def close_read
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
      @io.close
      nil
    end

    # @return [Boolean]
    def closed?
      @io.closed?
    end

    # @return [Integer]
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

    # The raw write: how many bytes of +data+ the kernel takes now, or
    # :wait_writable when it takes none (#write has it written out).
    def write_some(data)
      @socket ? write_socket(@io, data) : @io.write_nonblock(data, exception: false)
    end

    def check_open
      raise ClosedError, "IO is closed" if @io.closed?
    end

    # Raises unless +timeout+ is nil or a finite, non-negative number of
    # seconds; the message shows the value as given. A per-call timeout equal
    # to the +default+ one was checked when that was set. (#read and #write
    # make that test inline: no method call without a timeout.)
    def check_timeout(timeout, default = nil)
      return if timeout.nil? || timeout == default
      unless timeout.is_a?(Numeric)
        raise TypeError, "timeout must be a Numeric number of seconds (got #{timeout.inspect})"
      end
      return if timeout.real? && timeout.finite? && timeout >= 0

      raise ArgumentError, "timeout must be a finite, non-negative number of seconds (got #{timeout.inspect})"
    end

    # The next chunk of input, a String of its own, or nil at end of file;
    # Evix::ClosedError on a closed IO (#read leaves that check to it).
    # After a short read the kernel buffer is most likely empty: wait first
    # instead of paying a read that fails with EAGAIN (the registration is
    # level-triggered, so data that is already there wakes the wait at once).
    # After FAIR_READS reads without a wait it waits too, so a peer that never
    # stops sending cannot keep the loop to itself. Both are one counter,
    # @streak: full reads since the last wait, set to FAIR_READS by a short
    # read.
    #
    # The hot path of every server: the lone reader's wait is written out
    # here instead of calling #wait, two method calls fewer per round trip,
    # and instance variables are read once into locals: Ruby 3.1 as Debian
    # builds it reads one in ~45 instructions (PROFILE.md).
    # rubocop:disable Metrics
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
            # Ready, it is exactly READ (the loop masks the ready bits with the
            # interest): a comparison, where is_a? would be a method call.
            finish_wait(timeout) unless outcome == READ
          end
          streak = 0
          next # close_read may have come while waiting
        end
        chunk = @socket ? read_socket(io, maxlen) : read_other(maxlen)
        # This way round it is a pointer comparison; `chunk == :wait_readable`
        # would call String#==, which asks the Symbol for #to_str.
        if :wait_readable == chunk # rubocop:disable Style/YodaCondition
          streak = FAIR_READS
          next
        end
        return unless chunk

        # A binary String's size is its bytesize, and #size is an instruction
        # of the VM, not a method call.
        @streak = chunk.size < maxlen ? FAIR_READS : streak + 1
        @idle_timer&.again
        return chunk
      end
      # After close_read: end of file, unless the IO is closed altogether.
      raise ClosedError, "IO is closed" if io.closed?
    rescue Errno::ECONNRESET
      nil
    rescue ::IOError
      raise ClosedError, "IO is closed" if @io.closed?

      raise
    end
    # rubocop:enable Metrics

    # A read from an IO that is not a socket (a pipe, a tty, a file): into the
    # loop's scratch buffer, then a copy the size of what came.
    def read_other(maxlen)
      chunk = @io.read_nonblock(maxlen, @scratch, exception: false)
      chunk.is_a?(String) ? EMPTY + chunk : chunk
    end

    # Waits for +events+; on a closed IO wait_io raises Evix::ClosedError.
    # After close_read a wait to read returns at once.
    def wait(events, timeout)
      return true if @eof && events == READ && !@io.closed?

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

    def finish_wait(timeout)
      raise ClosedError, "IO was closed while waiting" if @io.closed?

      raise TimeoutError, "IO operation timed out after #{timeout}s"
    end
  end
end

require_relative "io_input"
require_relative "io_output"
