# frozen_string_literal: true

module Evix
  # Evix::IO's output half: whole writes (#write, and IO-style #puts,
  # #print, #<<), over the class's raw writes (write_some), and #try_write,
  # the write that never waits, for fanning one message out to many
  # connections.
  #
  # #try_write gives the kernel what it takes at once and queues the rest in
  # the IO's outbox, which a write watcher of the loop empties in the
  # background, in order. The outbox is bounded by the write high-water mark
  # (#write_high_water): a message that would take it past the mark is
  # refused whole, so a connection that does not read costs at most the
  # mark (plus one message) of memory. #flush waits until the outbox is
  # with the kernel. #write never queues: it returns when the kernel has its
  # bytes (after the outbox's, on the loop's thread).
  # @api private
  module IOOutput
    # Default of #write_high_water: bytes #try_write may queue.
    WRITE_HIGH_WATER = 1024 * 1024

    # @return [Integer] bytes #try_write may queue before it refuses a message
    attr_reader :write_high_water

    # @param bytes [Integer] not negative; 0 queues only when nothing else is
    # @return [Integer] +bytes+
    # @raise [ArgumentError, TypeError] a negative or non-Integer number
    def write_high_water=(bytes)
      @write_high_water = IO.high_water(bytes)
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
    # @param data [#to_s]
    # @param timeout [Numeric, nil]
    # @return [Integer] bytes written
    # @raise [Evix::TimeoutError] the kernel took nothing for +timeout+ seconds
    # @raise [Evix::ClosedError] the IO is or gets closed
    # @raise [SystemCallError] the write's error (Errno::EPIPE, Errno::ECONNRESET)
    def write(data, timeout: @timeout) # rubocop:disable Metrics/CyclomaticComplexity,Metrics/PerceivedComplexity -- #write_some written out, below
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

    # Writes each object's to_s and a newline after each that does not end
    # with one, in one #write, as IO#puts does (arrays are flattened; no
    # argument writes a newline).
    # @param objects [Array<#to_s, Array>]
    # @return [nil]
    # @raise (see #write)
    def puts(*objects)
      # The usual call, one String: no copy when it ends with a newline.
      if objects.size == 1 && (line = objects[0]).is_a?(String)
        write(line.end_with?("\n") ? line : "#{line}\n")
        return
      end
      out = String.new(encoding: Encoding::BINARY)
      objects.empty? ? out << "\n" : append_lines(out, objects, [])
      write(out) unless out.empty?
      nil
    end

    # Writes each object's to_s, in one #write. Unlike IO#print it uses
    # neither $, nor $\, and writes nothing (not $_) without arguments.
    # @param objects [Array<#to_s>]
    # @return [nil]
    # @raise (see #write)
    def print(*objects)
      case objects.size
      when 0 then nil
      when 1 then write(text(objects[0]))
      else write(objects.each_with_object(String.new(encoding: Encoding::BINARY)) { |o, out| out << bytes(text(o)) })
      end
      nil
    end

    # Writes +object+'s to_s (see #write).
    # @param object [#to_s]
    # @return [self]
    # @raise (see #write)
    def <<(object)
      write(object)
      self
    end

    # Writes +data+ (its to_s) without ever waiting, for fan-out: one
    # message to many connections, none of which may hold up the others.
    # The kernel gets what it takes now; the rest is queued and the loop
    # writes it, in order, when the connection is writable (even with no
    # task running). Nothing goes to the kernel ahead of what is queued.
    #
    # A message is taken whole or not at all: it is refused (false) when
    # something is queued and the queue would then hold more than
    # #write_high_water bytes. An empty queue takes any message, so a
    # message larger than the mark is never stuck. #queued_bytes tells how
    # far behind the reader is; a server decides what a refusal means
    # (drop the message, or disconnect a reader that stays behind).
    #
    # For the loop's thread only (the queue is the loop's); #write is the
    # one for other threads. Bytes #write sends while a try_write queue is
    # being written may come between them, as with any two writers at once.
    # @param data [#to_s]
    # @return [Integer, false] the bytesize of +data+ when taken, false when refused
    # @raise [Evix::ClosedError] on a closed IO
    # @raise [SystemCallError] the write's error (Errno::EPIPE,
    #   Errno::ECONNRESET), also one the background write met earlier
    # @raise [Evix::Error] on another thread
    def try_write(data)
      raise Error, "Evix::IO#try_write must be called on the loop's thread" unless Thread.current == @thread

      data = data.to_s
      check_open
      raise @write_error if @write_error

      size = data.bytesize
      return enqueue(data, size) if @outbox

      written = size.zero? ? 0 : write_some(data)
      written = 0 if written == :wait_writable
      start_outbox(data.byteslice(written, size - written)) if written < size
      size
    rescue ::IOError
      raise ClosedError, "IO is closed" if @io.closed?

      raise
    end

    # @return [Integer] bytes #try_write queued that the kernel has not taken
    #   yet (0 once the IO is closed: they never will be)
    def queued_bytes
      @outbox && !@io.closed? ? @outbox.bytesize : 0
    end

    # Waits until every byte #try_write queued is with the kernel. With
    # nothing queued it returns at once, also outside a task. The timeout
    # bounds each wait for the kernel to take more, as for #write.
    # @param timeout [Numeric, nil]
    # @return [self]
    # @raise [Evix::TimeoutError] the kernel took nothing for +timeout+
    #   seconds; the bytes stay queued
    # @raise [SystemCallError] the error that stopped the background write
    # @raise [Evix::Error] on another thread
    def flush(timeout: @timeout)
      check_timeout(timeout, @timeout)
      raise Error, "Evix::IO#flush must be called on the loop's thread" unless Thread.current == @thread

      check_open
      while @outbox
        drain
        wait(WRITE, timeout) if @outbox
      end
      raise @write_error if @write_error

      self
    end

    private

    # Queues +data+ behind a non-empty outbox unless that passes the mark.
    def enqueue(data, size)
      return false if @outbox.bytesize + size > @write_high_water

      @outbox << bytes(data)
      size
    end

    # Queues +rest+ (the part of a message the kernel did not take) and
    # starts the watcher that writes the queue.
    def start_outbox(rest)
      @outbox = rest.force_encoding(Encoding::BINARY) # a String of our own: appends need one encoding
      @drainer = @loop.add_io(@io, WRITE) { drain }
    end

    # Writes what the kernel takes of the outbox (the watcher's callback,
    # and #flush). An error ends the outbox; #try_write and #flush raise it.
    def drain
      outbox = @outbox or return
      written = write_some(outbox)
      return if written == :wait_writable

      left = outbox.bytesize - written
      return drop_outbox if left.zero?

      @outbox = outbox.byteslice(written, left) # a tail: shares the bytes, no copy
    rescue SystemCallError, ::IOError => e
      @write_error = e unless @io.closed?
      drop_outbox
    end

    def drop_outbox
      @outbox = nil
      @drainer&.cancel
      @drainer = nil
    end

    # puts' lines of +objects+ into +out+; +seen+: the arrays being
    # flattened, so that one holding itself writes "[...]" as IO#puts does.
    def append_lines(out, objects, seen)
      objects.each do |object|
        if object.is_a?(Array)
          next out << "[...]\n" if seen.any? { |array| array.equal?(object) }

          append_lines(out, object, [*seen, object])
        else
          line = text(object)
          out << bytes(line)
          out << "\n" unless line.end_with?("\n")
        end
      end
    end

    # +object+.to_s, or Object#to_s when that is not a String (as IO#puts).
    def text(object)
      string = object.to_s
      string.is_a?(String) ? string : Kernel.instance_method(:to_s).bind_call(object)
    end

    # +string+'s bytes, as a String a binary one can append whatever its content.
    def bytes(string)
      string.encoding == Encoding::BINARY || string.ascii_only? ? string : string.b
    end
  end
end
