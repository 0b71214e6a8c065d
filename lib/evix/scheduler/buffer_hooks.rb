# frozen_string_literal: true

require_relative "interface"

# The Fiber::Scheduler hooks on an IO::Buffer that are written in Ruby:
# reads at a file offset (#io_read and #io_write are native, in
# ext/evix/src/ruby/scheduler.rs). Each makes its system call in a blocking
# fiber, so that Ruby does not route it back into the scheduler.
# Evix::Scheduler (scheduler.rb) includes it.
module Evix::Scheduler::BufferHooks # rubocop:disable Style/ClassAndModuleChildren -- does not open the class
  if Evix::Scheduler::Interface::SELECT_AND_PREAD
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

  # Fiber::Scheduler hook io_pread as Ruby 4.1 calls it (see
  # Evix::Scheduler::Interface): one read of at most +length+ bytes at file
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

  # io_pwrite is not defined: Ruby 3.3 and 3.4 call it from inside
  # IO#pwrite's blocking region, without the GVL, where a hook that
  # switches fibers wedges the thread (spec/evix/scheduler/newer_rubies_spec.rb). IO#pwrite
  # then writes the file directly, as it does without a scheduler.

  private

  def check_range(buffer, offset, length)
    return if offset + length <= buffer.size

    raise ArgumentError, "offset + length exceeds the buffer's size (#{offset} + #{length} > #{buffer.size})"
  end

  # Runs the block in a blocking fiber, where IO#pread does not come back
  # into the scheduler. Ruby 3.1 has no Fiber.blocking: one long-lived
  # blocking fiber per scheduler runs the calls there, as a fiber per call
  # costs an mmap and an mprotect.
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
