# frozen_string_literal: true

module Evix
  # Evix::IO's raw I/O and waiting: one system call to read (#read_chunk) or
  # to write (#write_some), and the wait on the loop (Loop#wait_io) when the
  # kernel says it would block. Everything above it, the buffer and lines,
  # whole writes and the outbox, is in io_input.rb and io_output.rb.
  #
  # This is every server's hot path, written for speed where a measurement
  # showed it pays (docs/performance.md): no method call or allocation it can
  # do without, and no Kernel#loop (that C iterator would put two more pages
  # of machine stack under every parked fiber). Each trick says why where it
  # is made.
  class IO
    # Full reads in a row before a read gives the other fibers a turn.
    FAIR_READS = 16
    # Ends the waits of the readers when #close_read comes (never escapes).
    class EndOfReads < Exception; end # rubocop:disable Lint/InheritException -- no rescue of StandardError may catch it
    private_constant :EndOfReads

    # Waits until the IO is readable.
    # @param timeout [Numeric, nil]
    # @return [true]
    # @raise [Evix::TimeoutError] not readable within +timeout+ seconds
    # @raise [Evix::ClosedError] the IO is or gets closed
    def wait_readable(timeout: @timeout)
      check_timeout(timeout, @timeout)
      wait(READ, timeout)
    end

    # Waits until the IO is writable.
    # @param timeout [Numeric, nil]
    # @return [true]
    # @raise [Evix::TimeoutError] not writable within +timeout+ seconds
    # @raise [Evix::ClosedError] the IO is or gets closed
    def wait_writable(timeout: @timeout)
      check_timeout(timeout, @timeout)
      wait(WRITE, timeout)
    end

    private

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
    # The ivars @io and @streak are read once into locals: on Debian's Ruby 3.1 each
    # instance variable read is a call of ~45 instructions. The lone reader's
    # wait is written out here instead of calling #wait: two method calls
    # fewer per round trip.
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

    # A wait that ended without readiness: the IO was closed, or it timed out.
    def finish_wait(timeout)
      raise ClosedError, "IO was closed while waiting" if @io.closed?

      raise TimeoutError, "IO operation timed out after #{timeout}s"
    end
  end
end
