# frozen_string_literal: true

require "English"

module Evix
  # A non-blocking IO driven by a loop, for code running in an Evix::Task.
  # Every operation tries the system call first and waits (a one-shot
  # watcher plus Fiber.yield) only when the kernel says it would block.
  class IO
    CHUNK = 16 * 1024
    # Full reads in a row before a read gives the other fibers a turn.
    FAIR_READS = 16

    # @return [Numeric, nil] seconds each operation may wait (nil: no limit)
    attr_accessor :timeout

    # @return [::IO] the wrapped IO
    attr_reader :io

    # @return [Evix::Timer, nil] restarted on every read that gets data
    attr_accessor :idle_timer

    # @param loop [Evix::Loop]
    # @param io [::IO] an open IO; it is switched to non-blocking mode
    # @param timeout [Numeric, nil] default per-operation timeout in seconds
    def initialize(loop, io, timeout: nil)
      raise TypeError, "io must be an IO (got #{io.inspect})" unless io.respond_to?(:to_io)
      raise ClosedError, "IO is closed" if io.to_io.closed?

      @loop = loop
      @io = io.to_io
      @timeout = timeout
      @buffer = String.new(encoding: Encoding::BINARY)
      @waiters = {}
      @eof = false
      @drained = false
      @streak = 0
      @thread = Thread.current
    end

    # Reads up to +maxlen+ bytes; nil at end of file.
    # @return [String, nil]
    def read(maxlen = CHUNK, timeout: @timeout)
      check_open
      return take(maxlen) unless @buffer.empty?

      fill(maxlen, timeout) ? take(maxlen) : nil
    end

    # Reads exactly +length+ bytes; nil at end of file before the first byte,
    # EOFError if the stream ends part way.
    # @return [String, nil]
    def read_exactly(length, timeout: @timeout)
      check_open
      while @buffer.bytesize < length
        next if fill(CHUNK, timeout)
        return nil if @buffer.empty?

        raise EOFError, "end of file after #{@buffer.bytesize} of #{length} bytes"
      end
      take(length)
    end

    # Reads a line ending in +separator+ (at most +limit+ bytes); nil at end
    # of file. An empty separator reads a paragraph, like IO#gets("").
    # @return [String, nil]
    def gets(separator = $INPUT_RECORD_SEPARATOR, limit = nil, timeout: @timeout)
      check_open
      if separator.is_a?(Integer)
        limit = separator
        separator = $INPUT_RECORD_SEPARATOR
      end
      paragraph = separator&.empty?
      separator = "\n\n" if paragraph
      loop do
        @buffer.sub!(/\A\n+/, "") if paragraph
        line = line_from_buffer(separator, limit)
        return line if line
        next if fill(CHUNK, timeout)

        return @buffer.empty? ? nil : take(@buffer.bytesize)
      end
    end

    # Yields each line until end of file.
    # @return [self]
    def each_line(separator = $INPUT_RECORD_SEPARATOR, limit = nil, &block)
      return enum_for(:each_line, separator, limit) unless block

      while (line = gets(separator, limit))
        yield line
      end
      self
    end

    # Writes all of +data+, waiting whenever the kernel buffer is full.
    # @return [Integer] bytes written
    def write(data, timeout: @timeout)
      data = data.to_s.b
      total = data.bytesize
      until data.empty?
        written = @io.write_nonblock(data, exception: false)
        if written == :wait_writable
          wait(WRITE, timeout)
        else
          data = data.byteslice(written, data.bytesize - written)
        end
      end
      total
    rescue ::IOError
      raise ClosedError, "IO is closed" if @io.closed?

      raise
    end

    # Waits until the IO is readable. @return [true]
    def wait_readable(timeout: @timeout)
      wait(READ, timeout)
    end

    # Waits until the IO is writable. @return [true]
    def wait_writable(timeout: @timeout)
      wait(WRITE, timeout)
    end

    # Makes reads return what is buffered and then nil, without closing;
    # fibers waiting to read see end of file now. Writes still work.
    # @return [nil]
    def close_read
      @eof = true
      wake_waiters(READ, :eof)
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

      wake_waiters(READ | WRITE, :closed)
      @idle_timer&.cancel
      @buffer.clear
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

    private

    def check_open
      raise ClosedError, "IO is closed" if @io.closed?
    end

    # Reads more into the buffer; false at end of file. After a short read
    # the kernel buffer is most likely empty: wait first instead of paying a
    # read that fails with EAGAIN (the registration is level-triggered, so
    # data that is already there wakes the wait at once). After FAIR_READS
    # full reads in a row it waits too, so a peer that never stops sending
    # cannot keep the loop to itself.
    def fill(maxlen, timeout)
      loop do
        return false if @eof
        raise ClosedError, "IO is closed" if @io.closed?

        wait(READ, timeout) if @drained || (@streak += 1) > FAIR_READS
        @drained = false
        chunk = @io.read_nonblock(maxlen, @loop.read_buffer, exception: false)
        case chunk
        when :wait_readable then @drained = true
        when nil then return false
        else
          @drained = chunk.bytesize < maxlen
          @streak = 0 if @drained
          @buffer << chunk
          @idle_timer&.again
          return true
        end
      end
    rescue Errno::ECONNRESET
      false
    end

    # The first +length+ bytes of the buffer; the whole buffer is handed over
    # as is (no copy, and no capacity left behind on an idle connection).
    def take(length)
      return @buffer.slice!(0, length) if length < @buffer.bytesize

      taken = @buffer
      @buffer = String.new(encoding: Encoding::BINARY)
      taken
    end

    def line_from_buffer(separator, limit)
      index = separator && @buffer.index(separator)
      return take(index + separator.bytesize) if index && (limit.nil? || index + separator.bytesize <= limit)
      return take(limit) if limit && @buffer.bytesize >= limit

      nil
    end

    def wait(events, timeout)
      raise Error, "Evix::IO must be used inside a task (Evix::Loop#spawn)" unless Task.current

      check_open
      return true if events == READ && @eof

      fiber = Fiber.current
      @waiters[fiber] = events
      finish_wait(@loop.wait_io(@io, events, timeout), timeout)
    ensure
      @waiters.delete(fiber) if fiber
    end

    def finish_wait(outcome, timeout)
      raise ClosedError, "IO was closed while waiting" if @io.closed?

      case outcome
      when Integer, :eof then true
      when nil then raise TimeoutError, "IO operation timed out after #{timeout}s"
      when :closed then raise ClosedError, "IO was closed while waiting"
      else raise Error, "unexpected resume of a fiber waiting on an Evix::IO: #{outcome.inspect}"
      end
    end

    # Resumes the fibers waiting for +events+ with +outcome+ on the next tick.
    def wake_waiters(events, outcome)
      @waiters.each do |fiber, waited|
        next if waited.nobits?(events)

        @loop.next_tick { fiber.resume(outcome) if @waiters[fiber] == waited }
      end
    end
  end
end
