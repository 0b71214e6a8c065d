# frozen_string_literal: true

module Evix
  module HTTP
    # rack.input: the request body, read from the connection as the app asks
    # for it (nothing is read before). What was read is kept, in memory up to
    # +memory+ bytes and in a Tempfile past that, so #rewind works as Rack 2
    # wants. The first read of a request that sent "Expect: 100-continue"
    # answers "100 Continue" first.
    #
    # The body's framing (a length, or chunked) and its limits come from the
    # head's parse; a chunked body the decoder refuses raises
    # Evix::HTTP::RequestError, which the server answers with its status.
    class Input
      # Bytes kept in memory before the body goes to a Tempfile.
      MEMORY = 128 * 1024
      CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n"
      private_constant :CONTINUE

      # @param client [Evix::IO] the connection
      # @param length [Integer, nil] the body's length; nil: chunked
      # @param decoder [Evix::HTTP::ChunkedDecoder, nil] for a chunked body
      # @param continue [Boolean] answer "100 Continue" before the first read
      # @param memory [Integer] bytes kept in memory before a Tempfile
      def initialize(client, length, decoder, continue: false, memory: MEMORY)
        @client = client
        @left = length # bytes of a fixed-length body not read from the connection yet
        @decoder = decoder
        @continue = continue
        @memory = memory
        @store = StringIO.new(String.new(encoding: Encoding::BINARY))
        @closed = false
        @last_newline = nil # where in the store the last "\n" is: #gets waits for one past its position
      end

      # Reads as IO#read: up to +length+ bytes (nil: to the end), into
      # +buffer+ if given; nil at the end when a length was given.
      # @param length [Integer, nil]
      # @param buffer [String, nil]
      # @return [String, nil]
      # @raise [ArgumentError] a negative length
      # @raise [IOError] once closed
      def read(length = nil, buffer = nil)
        check_open
        raise ArgumentError, "negative length #{length} given" if length&.negative?

        fill_for(length)
        data = @store.read(length)
        return data unless buffer

        buffer.replace(data || "")
        data && buffer
      end

      # The next line ("\n" ends it), or nil at the end.
      # @return [String, nil]
      # @raise [IOError] once closed
      def gets
        check_open
        pull until finished? || (@last_newline && @last_newline >= @store.pos)
        @store.gets
      end

      # Yields each line.
      # @yieldparam line [String]
      # @return [self]
      def each
        while (line = gets)
          yield line
        end
        self
      end

      # Back to the start of the body (what was read is kept).
      # @return [0]
      def rewind
        check_open
        @store.rewind
        0
      end

      # Drops what was kept; further reads raise IOError.
      # @return [nil]
      def close
        @closed = true
        @store.close unless @store.closed?
        nil
      end

      # Reads and forgets the rest of the body (for the next request on
      # the connection), at most +limit+ bytes.
      # @api private
      # @param limit [Integer]
      # @return [Boolean] whether the body ended within +limit+
      def skip_rest(limit)
        # The client waits for a "100 Continue" that can no longer come after
        # the final response: only a close ends this request.
        return false if @continue

        skipped = 0
        until finished?
          return false if skipped > limit

          before = stored
          pull(keep: false)
          skipped += stored - before
        end
        true
      end

      # @api private
      # @return [Boolean] whether the whole body was read from the connection
      def finished?
        @decoder ? @decoder.done? : @left.zero?
      end

      # @return [String] the external encoding rack.input has: binary
      def external_encoding
        Encoding::BINARY
      end

      private

      def check_open
        raise IOError, "closed stream" if @closed
      end

      # Pulls until +length+ bytes are unread in the store (nil: the whole
      # body), or the body ends.
      def fill_for(length)
        if length.nil?
          pull until finished?
        else
          pull while unread < length && !finished?
        end
      end

      def memory?
        @store.is_a?(StringIO)
      end

      def stored
        memory? ? @store.string.bytesize : @store.size
      end

      def unread
        stored - @store.pos
      end

      # Reads the next piece of the body from the connection onto the end of
      # the store (or nowhere, +keep+ false).
      def pull(keep: true)
        continue!
        data = @decoder ? pull_chunked : pull_fixed
        raise EOFError, "the client closed the connection before the end of the body" unless data
        return unless keep && !data.empty?

        spill if memory? && stored + data.bytesize > @memory
        position = @store.pos
        @store.seek(0, ::IO::SEEK_END)
        newline = data.rindex("\n")
        @last_newline = @store.pos + newline if newline
        @store.write(data)
        @store.pos = position
      end

      def pull_fixed
        data = @client.read(@left < Evix::IO::CHUNK ? @left : Evix::IO::CHUNK) or return
        @left -= data.bytesize
        data
      end

      def pull_chunked
        out = String.new(encoding: Encoding::BINARY)
        used = @client.parse_buffered(@client.timeout) do |buffer, offset|
          used = @decoder.decode(buffer, offset, out)
          used if used.negative? || used.positive? || @decoder.done?
        end
        return unless used
        raise RequestError.new(-used, @decoder.reason) if used.negative?

        out
      end

      def continue!
        return unless @continue

        @continue = false
        @client.write(CONTINUE)
      end

      # Past +memory+ bytes: the body moves to a Tempfile.
      def spill
        require "tempfile"
        file = Tempfile.new("evix-body", binmode: true)
        file.unlink # nothing to clean up even if the process dies
        position = @store.pos
        file.write(@store.string)
        file.pos = position
        @store = file
      end
    end
  end
end

module Evix
  module HTTP
    # rack.input of a request without a body: nothing to read, nothing to
    # keep, so one frozen instance (Input::EMPTY) serves every such request.
    class EmptyInput
      # As IO#read at end of file: "" without a length (or 0), else nil.
      # @param length [Integer, nil]
      # @param buffer [String, nil] cleared
      # @return [String, nil]
      # @raise [ArgumentError] a negative length
      def read(length = nil, buffer = nil)
        raise ArgumentError, "negative length #{length} given" if length&.negative?

        buffer&.clear
        return nil if length&.positive?

        buffer || String.new(encoding: Encoding::BINARY)
      end

      # @return [nil] no line
      def gets
        nil
      end

      # Yields nothing.
      # @return [self]
      def each
        self
      end

      # @return [0]
      def rewind
        0
      end

      # @return [nil]
      def close
        nil
      end

      # @return [Encoding] binary, as rack.input's
      def external_encoding
        Encoding::BINARY
      end
    end

    class Input
      # The rack.input of every request without a body.
      EMPTY = EmptyInput.new.freeze
    end
  end
end
