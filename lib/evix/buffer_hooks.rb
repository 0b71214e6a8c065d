# frozen_string_literal: true

require_relative "scheduler_interface"

module Evix
  class Scheduler
    # The Fiber::Scheduler hooks that move bytes through an IO::Buffer and
    # are written in Ruby, and the Ruby half of the C hook #io_read
    # (ext/evix/src/ruby/scheduler.rs), which reads a socket's bytes itself
    # and leaves every other IO to #io_read_other. (#io_write, in C, writes
    # every IO itself.)
    # Each does its system call so that Ruby does not route it back into the
    # scheduler (inside a blocking fiber where that is needed).
    module BufferHooks
      if Interface::SELECT_AND_PREAD
        # Fiber::Scheduler hook (IO#pread, Ruby 3.3 to 4.0): reads at file offset +from+.
        # @param io [::IO]
        # @param buffer [IO::Buffer]
        # @param from [Integer] the file offset
        # @param length [Integer] at least this many bytes (0: one read)
        # @param offset [Integer] where in +buffer+
        # @return [Integer] bytes read, or -errno
        def io_pread(io, buffer, from, length, offset)
          total = 0
          while total.zero? || total < length
            chunk = blocking { io.pread(buffer.size - offset, from) }
            break if chunk.nil? || chunk.empty?

            buffer.set_string(chunk, offset)
            offset += chunk.bytesize
            from += chunk.bytesize
            total += chunk.bytesize
            break if offset >= buffer.size
          end
          total
        rescue EOFError
          total
        rescue SystemCallError => e
          -e.errno
        end
      end

      # Fiber::Scheduler hook io_pread as Ruby 4.1 calls it (the one on
      # Ruby 4.1, see Interface): one read of at most +length+ bytes at file
      # offset +from+ into +buffer+ at +offset+.
      # @param io [::IO]
      # @param buffer [IO::Buffer]
      # @param from [Integer] the file offset
      # @param offset [Integer] where in +buffer+
      # @param length [Integer] at most this many bytes
      # @return [Integer] bytes read (0 at end of file), or -errno
      def io_pread_once(io, buffer, from, offset, length)
        check_range(buffer, offset, length)
        return 0 if length.zero?

        chunk = blocking { io.pread(length, from) }
        buffer.set_string(chunk, offset)
        chunk.bytesize
      rescue EOFError
        0
      rescue SystemCallError => e
        -e.errno
      end

      # The Ruby half of #io_read_once (called by the native hook): one read
      # of at most +length+ bytes from an IO whose bytes Ruby's own read
      # buffer holds (an ungetc).
      # @param io [::IO]
      # @param buffer [IO::Buffer]
      # @param offset [Integer]
      # @param length [Integer]
      # @return [Integer] bytes read (0 at end of file), -EAGAIN, or -errno
      def io_read_other_once(io, buffer, offset, length)
        check_range(buffer, offset, length)
        chunk = read_nonblock(io, [length, SCRATCH_LIMIT].min)
        return -EAGAIN if :wait_readable == chunk # rubocop:disable Style/YodaCondition -- no method call
        return 0 unless chunk

        buffer.set_string(chunk, offset)
        chunk.bytesize
      rescue SystemCallError => e
        -e.errno
      end

      # io_pwrite is not defined: Ruby 3.3 and 3.4 call it from inside
      # IO#pwrite's blocking region, without the GVL, where a hook that
      # switches fibers wedges the thread (spec/evix/newer_rubies_spec.rb). IO#pwrite
      # then writes the file directly, as it does without a scheduler.

      # Reads go through one String per scheduler (then copied into the
      # buffer) instead of a new String each, at most this many bytes at once.
      SCRATCH_LIMIT = 64 * 1024
      EAGAIN = Errno::EAGAIN::Errno
      private_constant :SCRATCH_LIMIT, :EAGAIN

      # The Ruby half of #io_read (called by the native hook, not by Ruby):
      # io_read on an IO whose bytes Ruby's own read buffer holds (an
      # ungetc), which a read(2) would skip over: reads at least +length+
      # bytes (0: whatever is available) into +buffer+ at +offset+, waiting
      # until there are some; for IO#read_nonblock -EAGAIN instead of a wait.
      # @param io [::IO]
      # @param buffer [IO::Buffer]
      # @param length [Integer]
      # @param offset [Integer]
      # @return [Integer] bytes read, or -errno
      def io_read_other(io, buffer, length, offset = 0)
        total = 0
        while true # rubocop:disable Style/InfiniteLoop -- Kernel#loop adds a C frame
          chunk = read_nonblock(io, [buffer.size - offset, SCRATCH_LIMIT].min)
          if :wait_readable == chunk # rubocop:disable Style/YodaCondition -- no method call
            return -EAGAIN if 0 == length && nonblock_call? # rubocop:disable Style/YodaCondition,Style/NumericPredicate -- no method call
            return -Errno::ETIMEDOUT::Errno unless wait_for(io, READ)

            next
          end
          break unless chunk # end of file

          buffer.set_string(chunk, offset)
          total += (read = chunk.bytesize)
          break if total >= length

          offset += read
        end
        total
      rescue SystemCallError => e
        -e.errno
      end

      private

      def check_range(buffer, offset, length)
        return if offset + length <= buffer.size

        raise ArgumentError, "offset + length exceeds the buffer's size (#{offset} + #{length} > #{buffer.size})"
      end

      def setup_buffer_hooks
        @scratch = ::String.new(capacity: 16 * 1024, encoding: Encoding::BINARY)
      end

      # Whether this io_read came from IO#read_nonblock, which must not wait:
      # -EAGAIN makes it return :wait_readable or raise IO::EAGAINWaitReadable.
      # Ruby 3.1 calls io_read with length 0 for it and for every other read
      # alike, and the others must wait here (IO#sysread raises on -EAGAIN),
      # so only the caller tells them apart: the frame under the io_read hook
      # (asked only when there is nothing to read, just before a wait). Its
      # base_label: Ruby 3.4's label is "IO#read_nonblock".
      def nonblock_call?
        caller_locations(2, 3).any? { |frame| frame.base_label == "read_nonblock" && frame.path == "<internal:io>" }
      end

      def read_nonblock(io, size)
        blocking { io.read_nonblock(size, @scratch, exception: false) }
      end

      # Runs the block in a blocking fiber, where IO#read_nonblock does not
      # come back into io_read (Ruby 3.1's does on IOs other than sockets).
      # Ruby 3.1 has no Fiber.blocking:
      # one long-lived blocking fiber per scheduler runs the calls there, as
      # creating a fiber per read costs an mmap and an mprotect.
      if Fiber.respond_to?(:blocking)
        def blocking(&)
          Fiber.blocking(&)
        end
      else
        def blocking(&block)
          @blocking ||= Fiber.new(blocking: true) do |job|
            while true # rubocop:disable Style/InfiniteLoop -- Kernel#loop adds a C frame
              outcome = begin
                [true, job.call]
              rescue Exception => e # rubocop:disable Lint/RescueException -- re-raised by the caller
                [false, e]
              end
              job = Fiber.yield(outcome)
            end
          end
          ok, value = @blocking.resume(block)
          raise value unless ok

          value
        end
      end
    end
  end
end
