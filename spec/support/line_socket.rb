# frozen_string_literal: true

require "io/wait"
require "socket"

# A line-oriented client on a plain socket; every read waits at most a timeout.
class LineSocket
  # Raised when no line arrives in time.
  class Timeout < StandardError; end

  attr_reader :io

  def self.now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def initialize(io)
    @io = io
    @buffer = String.new(encoding: Encoding::BINARY)
  end

  def puts(line)
    @io.write("#{line}\n")
  end

  # The next line without its newline; nil at end of file. Raises after +timeout+.
  def gets(timeout: 2)
    deadline = LineSocket.now + timeout
    until (index = @buffer.index("\n"))
      return (@buffer.empty? ? nil : @buffer.slice!(0..)) unless fill(deadline)
    end
    @buffer.slice!(0..index).chomp
  end

  # Every line until end of file.
  def lines_until_eof(timeout: 5)
    lines = []
    while (line = gets(timeout: timeout))
      lines << line
    end
    lines
  end

  # True if nothing arrives within +timeout+ (what does arrive stays buffered).
  def quiet?(timeout: 0.2)
    return false unless @buffer.empty?

    fill(LineSocket.now + timeout)
    false
  rescue Timeout
    true
  end

  def close
    @io.close unless @io.closed?
  end

  private

  # Reads more into the buffer; false at end of file.
  def fill(deadline)
    loop do
      remaining = deadline - LineSocket.now
      raise Timeout, "no line in time (buffered: #{@buffer[0, 200].inspect})" if remaining <= 0
      next unless @io.wait_readable(remaining)

      chunk = @io.read_nonblock(64 * 1024, exception: false)
      next if chunk == :wait_readable
      return false if chunk.nil?

      @buffer << chunk
      return true
    end
  rescue Errno::ECONNRESET
    false
  end
end
