# frozen_string_literal: true

module Evix
  class Scheduler
    # The Fiber::Scheduler hooks that move bytes through an IO::Buffer. Each
    # does its system call inside a blocking fiber, so Ruby does not route it
    # back into the scheduler. (Leaving reads to Ruby would be cheaper on
    # 3.1, but there IO#close from another fiber then raises "stream closed
    # in another thread" in the closer instead of waking the reader.)
    module BufferHooks
      # Fiber::Scheduler hook: reads at least +length+ bytes (0: whatever is
      # available) into +buffer+ at +offset+.
      # @return [Integer] bytes read, or -errno
      def io_read(io, buffer, length, offset = 0)
        total = 0
        while total.zero? || total < length
          chunk = read_nonblock(io, buffer.size - offset)
          return total if chunk.nil?

          if :wait_readable == chunk # rubocop:disable Style/YodaCondition -- no String#== call
            return -Errno::ETIMEDOUT::Errno unless io_wait(io, ::IO::READABLE, io_timeout(io))
          else
            buffer.set_string(chunk, offset)
            offset += chunk.bytesize
            total += chunk.bytesize
          end
        end
        total
      rescue SystemCallError => e
        -e.errno
      end

      # Fiber::Scheduler hook: writes at least +length+ bytes (0: what the
      # kernel takes at once) from +buffer+ at +offset+.
      # @return [Integer] bytes written, or -errno
      def io_write(io, buffer, length, offset = 0)
        total = 0
        while (total.zero? || total < length) && offset < buffer.size
          written = write_nonblock(io, buffer.get_string(offset))
          if written == :wait_writable
            return -Errno::ETIMEDOUT::Errno unless io_wait(io, ::IO::WRITABLE, io_timeout(io))
          else
            offset += written
            total += written
          end
        end
        total
      rescue SystemCallError => e
        -e.errno
      end

      if RUBY_VERSION >= "3.3"
        # Fiber::Scheduler hook (IO#pread, Ruby >= 3.3): reads at file offset +from+.
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

      if RUBY_VERSION >= "3.4"
        # Fiber::Scheduler hook (IO#pwrite, Ruby >= 3.4): writes at file offset
        # +from+, on the offload pool.
        # @return [Integer] bytes written, or -errno
        def io_pwrite(io, buffer, from, length, offset)
          total = 0
          while (total.zero? || total < length) && offset < buffer.size
            data = buffer.get_string(offset)
            written = @loop.offload { io.pwrite(data, from) }
            offset += written
            from += written
            total += written
          end
          total
        rescue SystemCallError => e
          -e.errno
        end
      end

      private

      # Ruby 3.1's BasicSocket#read_nonblock and IO#write_nonblock call the
      # kernel directly; only IO#read_nonblock on other IOs would come back
      # into io_read, so only that needs the blocking fiber there. (Later
      # Rubies have a cheap Fiber.blocking, used for every call.)
      if Fiber.respond_to?(:blocking)
        def read_nonblock(io, size)
          Fiber.blocking { io.read_nonblock(size, exception: false) }
        end

        def write_nonblock(io, data)
          Fiber.blocking { io.write_nonblock(data, exception: false) }
        end
      else
        def read_nonblock(io, size)
          return io.read_nonblock(size, exception: false) if io.is_a?(BasicSocket)

          blocking { io.read_nonblock(size, exception: false) }
        end

        def write_nonblock(io, data)
          io.write_nonblock(data, exception: false)
        end
      end

      # Runs the block in a blocking fiber. Ruby 3.1 has no Fiber.blocking:
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
