# frozen_string_literal: true

module Evix
  module HTTP
    # The connection as a Rack app gets it to own: the +stream+ of a
    # streaming body (+body.call(stream)+), the IO of a response hijack
    # (+headers["rack.hijack"]+) and of a full hijack (+env["rack.hijack"].call+).
    # It reads what the client sent past the request head (buffered input
    # included) and writes straight to the client; its waits are the loop's,
    # so it works from the app's task like any evix IO. Closing it closes
    # the connection.
    class Stream
      # @return [Evix::IO] the connection it wraps
      attr_reader :io

      # @param io [Evix::IO] the connection
      def initialize(io)
        @io = io
        @write_closed = false
      end

      # Reads as IO#read: up to +length+ bytes (nil: to end of file).
      # @param length [Integer, nil]
      # @param buffer [String, nil]
      # @return [String, nil]
      def read(length = nil, buffer = nil)
        data = length ? read_up_to(length) : read_all
        return data unless buffer

        buffer.replace(data || "")
        data && buffer
      end

      # Reads what is there, waiting only when nothing is: as IO#readpartial.
      # @param length [Integer]
      # @param buffer [String, nil]
      # @return [String]
      # @raise [EOFError] at end of file
      def readpartial(length, buffer = nil)
        @io.readpartial(length, buffer)
      end

      # As IO#read_nonblock: what is buffered or readable now.
      # @param length [Integer]
      # @param buffer [String, nil]
      # @param exception [Boolean] false: :wait_readable in place of IO::WaitReadable
      # @return [String, Symbol, nil]
      def read_nonblock(length, buffer = nil, exception: true)
        @io.readpartial(length, buffer, timeout: 0)
      rescue Evix::TimeoutError
        raise ::IO::EAGAINWaitReadable, "read would block" if exception

        :wait_readable
      rescue EOFError
        raise if exception
      end

      # Writes all of +data+.
      # @param data [String]
      # @return [Integer] bytes written
      def write(data)
        data = data.to_s
        @io.write(data)
        data.bytesize
      end

      # As IO#write_nonblock; writes all of +data+ (the loop waits, not the
      # caller's thread).
      # @param data [String]
      # @param exception [Boolean] accepted for IO's signature
      # @return [Integer]
      def write_nonblock(data, exception: true) # rubocop:disable Lint/UnusedMethodArgument
        write(data)
      end

      # @param data [String]
      # @return [self]
      def <<(data)
        write(data)
        self
      end

      # Writes are not buffered: nothing to flush.
      # @return [self]
      def flush
        self
      end

      # Stops reading: further reads see end of file.
      # @return [nil]
      def close_read
        @io.close_read
      end

      # Half-closes the connection (the client sees end of file) if it is a
      # plain socket; over TLS the connection is closed instead.
      # @return [nil]
      def close_write
        @write_closed = true
        sock = @io.io
        sock.respond_to?(:shutdown) && !@io.respond_to?(:ssl_socket) ? sock.shutdown(::Socket::SHUT_WR) : @io.close
        nil
      rescue SystemCallError, IOError
        nil
      end

      # Closes the connection.
      # @return [nil]
      def close
        @io.close
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

      # Up to +length+ bytes, fewer only at end of file (nil then if none).
      def read_up_to(length)
        out = String.new(encoding: Encoding::BINARY)
        while out.bytesize < length && (data = @io.read(length - out.bytesize))
          out << data
        end
        out.empty? && length.positive? ? nil : out
      end

      def read_all
        out = String.new(encoding: Encoding::BINARY)
        while (data = @io.read)
          out << data
        end
        out
      end
    end
  end
end
