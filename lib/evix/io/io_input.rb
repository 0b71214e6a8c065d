# frozen_string_literal: true

module Evix
  # Evix::IO's input half: buffering and line reading (#read, #read_exactly,
  # #readpartial, #gets, #each_line, #eof?), over the class's raw reads
  # (read_chunk). The buffer is @buffer from @offset on; what was handed out
  # is dropped once per read into the buffer, not once per line. Lines are
  # found, cut at the limit and chomped natively (buffered_line, chomp_line
  # in ext/evix/src/ruby/io.rs); Ruby only reads more input until the buffer
  # holds a whole line.
  # @api private
  module IOInput
    # Bytes one read asks the kernel for.
    CHUNK = 16 * 1024
    EMPTY = "".b.freeze
    PARAGRAPH = "\n\n"
    LF = "\n".ord
    CHOMP = { chomp: true }.freeze
    private_constant :EMPTY, :PARAGRAPH, :LF, :CHOMP

    # Reads up to +maxlen+ bytes: what is buffered, else what the next read
    # gets; nil at end of file.
    # @param maxlen [Integer] not negative
    # @param timeout [Numeric, nil]
    # @return [String, nil]
    # @raise [ArgumentError] a negative maxlen, a bad timeout
    # @raise [Evix::TimeoutError, Evix::ClosedError]
    # @raise [Errno::ECONNRESET] the peer reset the connection (never nil)
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
    # @param timeout [Numeric, nil]
    # @return [String, nil]
    # @raise [EOFError] the stream ended part way
    # @raise [ArgumentError, TypeError] a negative or non-Integer length
    # @raise [Evix::TimeoutError, Evix::ClosedError]
    # @raise [Errno::ECONNRESET] the peer reset the connection
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

    # Reads a line ending in +separator+ (at most +limit+ bytes); nil at end
    # of file. As IO#gets: an Integer first argument is the limit; an empty
    # separator reads a paragraph; a nil one reads to end of file; a
    # negative limit is no limit; +chomp+ drops the separator (and a "\r"
    # before a "\n" one) from a line that ends with it. Lines are binary
    # Strings.
    #
    # Lines already buffered are handed out even after IO#close on the
    # wrapped IO itself (Evix::IO#close drops them); then it raises
    # Evix::ClosedError.
    #
    # @overload gets(separator = $/, limit = nil, timeout: self.timeout, chomp: false)
    #   @param separator [String, nil]
    #   @param limit [Integer, nil]
    #   @param timeout [Numeric, nil]
    #   @param chomp [Boolean]
    #   @return [String, nil]
    #   @raise [TypeError] a separator or limit of another type
    #   @raise [ArgumentError] an unknown keyword, a bad timeout
    #   @raise [Evix::TimeoutError, Evix::ClosedError]
    #   @raise [Errno::ECONNRESET] the peer reset the connection
    #
    # The keywords arrive as a trailing positional Hash (+keywords+, or in
    # the place of +separator+ or +limit+): on Ruby 3.1 a method with keyword
    # parameters costs more a call than the rest of a buffered line.
    def gets(separator = $INPUT_RECORD_SEPARATOR, limit = nil, keywords = nil)
      # The usual call on busy input: a whole line is already buffered, and
      # one native call finds and copies it. (A Hash in the place of
      # separator or limit is unusual: nil.)
      if keywords.nil? && (line = buffered_line(buffer = @buffer, offset = @offset, 0, separator, limit))
        # A binary String's size is its bytesize, and #size is an instruction.
        offset += line.size
        if offset == buffer.size
          @buffer = +EMPTY
          @offset = 0
        else
          @offset = offset
        end
        return line
      end
      # false: no whole line yet, and all that is buffered was searched.
      gets_with_keywords(separator, limit, keywords, line.nil? ? 0 : @buffer.size - @offset)
    end

    # Yields each line until end of file (see #gets). A limit of 0 raises
    # ArgumentError, as for IO#each_line: it would yield "" forever.
    # @param separator [String, nil, Integer] as for #gets
    # @param limit [Integer, nil] as for #gets
    # @param chomp [Boolean] as for #gets
    # @yieldparam line [String]
    # @return [self, Enumerator] an Enumerator without a block
    # @raise [ArgumentError] a limit of 0
    def each_line(separator = $INPUT_RECORD_SEPARATOR, limit = nil, chomp: false, &block)
      return enum_for(:each_line, separator, limit, chomp: chomp) unless block
      raise ArgumentError, "invalid limit: 0 for each_line" if (separator.is_a?(Integer) ? separator : limit)&.zero?

      keywords = chomp ? CHOMP : nil # one Hash for every line
      while (line = gets(separator, limit, keywords))
        yield line
      end
      self
    end

    # Reads up to +maxlen+ bytes: what is buffered, else what the next read
    # gets, waiting only when nothing is there. As IO#readpartial, EOFError
    # at end of file, and +outbuf+ (if given) receives the bytes.
    # @param maxlen [Integer] not negative
    # @param outbuf [String, nil]
    # @param timeout [Numeric, nil]
    # @return [String]
    # @raise [EOFError] at end of file
    # @raise [ArgumentError, TypeError] a negative or non-Integer maxlen, an
    #   outbuf that is not a String
    # @raise [Errno::ECONNRESET] the peer reset the connection
    def readpartial(maxlen, outbuf = nil, timeout: @timeout)
      raise TypeError, "maxlen must be an Integer (got #{maxlen.inspect})" unless maxlen.is_a?(Integer)
      raise ArgumentError, "negative length #{maxlen} given" if maxlen.negative?
      raise TypeError, "buffer must be a String (got #{outbuf.inspect})" unless outbuf.nil? || outbuf.is_a?(String)

      check_timeout(timeout, @timeout)
      check_open
      data = maxlen.zero? ? +"" : read(maxlen, timeout: timeout)
      unless data
        outbuf&.clear
        raise EOFError, "end of file reached"
      end
      outbuf ? outbuf.replace(data) : data
    end

    # Whether the stream is at end of file. As IO#eof?, it waits for input
    # when none is buffered; what arrives stays for the next read.
    # @param timeout [Numeric, nil]
    # @return [Boolean]
    # @raise [Evix::TimeoutError, Evix::ClosedError]
    # @raise [Errno::ECONNRESET] the peer reset the connection
    def eof?(timeout: @timeout)
      check_timeout(timeout, @timeout)
      check_open
      @buffer.empty? && !fill(timeout)
    end
    alias eof eof?

    # Hands the unread input to a parser that works on the buffer in place
    # (Evix::HTTP's, in Rust): yields the buffer and the offset where the
    # unread bytes start, and reads more while the block returns nil. A
    # non-negative Integer from the block is how many bytes it used (they
    # are dropped from the buffer); a negative one is returned as it is,
    # nothing used. The block is not called while nothing is buffered.
    # @api private
    # @param timeout [Numeric, nil] seconds the whole call may wait
    # @yieldparam buffer [String] do not keep or change it
    # @yieldparam offset [Integer]
    # @yieldreturn [Integer, nil]
    # @return [Integer, nil] the block's Integer; nil at end of file
    # @raise [Evix::TimeoutError] the block still wanted more at the deadline
    # @raise [Evix::ClosedError]
    def parse_buffered(timeout)
      deadline = nil
      until !@buffer.empty? && (used = yield @buffer, @offset)
        if timeout
          deadline ||= Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise TimeoutError, "IO operation timed out after #{timeout}s" unless left.positive?
        end
        return nil unless fill(left)
      end
      consume_to(@offset + used) unless used.negative?
      used
    end

    private

    # #gets with keywords, or with no whole line buffered; +searched+ bytes
    # of the buffer hold no separator.
    # rubocop:disable Metrics -- the checks written out: each_line(chomp: true) comes here for every line
    def gets_with_keywords(separator, limit, keywords, searched)
      if keywords.nil? && separator.is_a?(Hash)
        return gets_with_keywords($INPUT_RECORD_SEPARATOR, limit, separator, searched)
      end
      return gets_with_keywords(separator, nil, limit, searched) if keywords.nil? && limit.is_a?(Hash)

      timeout = @timeout
      chomp = false
      keywords&.each_pair do |key, value|
        case key
        when :timeout then timeout = value
        when :chomp then chomp = value
        else raise ArgumentError, "unknown keyword: #{key.inspect}"
        end
      end
      check_timeout(timeout) if timeout && timeout != @timeout
      raise ClosedError, "IO is closed" if @io.closed?

      if (line = buffered_line(@buffer, @offset, searched, separator, limit))
        consume_to(@offset + line.size)
        return chomp && separator ? chomp_line(line, separator) : line
      end
      read_line(separator, limit, timeout, line, chomp)
    end
    # rubocop:enable Metrics

    # Moves the start of what is buffered to +offset+ (#gets inlines this).
    def consume_to(offset)
      if offset == @buffer.size
        @buffer = +EMPTY
        @offset = 0
      else
        @offset = offset
      end
    end

    # The next line (arguments as #gets takes them), reading more until the
    # buffer holds a whole one; at end of file the rest, nil if none. +line+
    # is what the search of the buffer just gave: false (no whole line, all
    # of it searched) or nil (arguments to make usual first). Each search
    # resumes where the last one stopped.
    def read_line(separator, limit, timeout, line, chomp)
      if line.nil?
        # Arguments the line reader takes only once made usual.
        separator, limit = line_arguments(separator, limit)
        if (paragraph = separator&.empty?)
          separator = PARAGRAPH
          skip_newlines(0)
        end
        line = buffered_line(@buffer, @offset, 0, separator, limit)
      end
      until line
        searched = @buffer.size - @offset
        # End of file: the rest, which does not end with the separator.
        return @buffer.empty? ? nil : take(searched) unless fill(timeout)

        searched = skip_newlines(searched) if paragraph
        line = buffered_line(@buffer, @offset, searched, separator, limit)
      end
      consume_to(@offset + line.size)
      chomp && separator ? chomp_line(line, separator) : line
    end

    # [separator, limit] as #gets takes them: an Integer separator is the
    # limit, a negative limit none, a separator with non-ASCII characters
    # its bytes.
    def line_arguments(separator, limit)
      if separator.is_a?(Integer) && limit.nil?
        limit = separator
        separator = $INPUT_RECORD_SEPARATOR
      end
      unless limit.nil? || limit.is_a?(Integer)
        raise TypeError, "limit must be an Integer or nil (got #{limit.inspect})"
      end

      [separator_bytes(separator), limit&.negative? ? nil : limit]
    end

    # +separator+ as the binary buffer compares it (nil stays nil).
    def separator_bytes(separator)
      return separator if separator.nil? || (separator.is_a?(String) && separator.ascii_only?)
      return separator.b if separator.is_a?(String)

      raise TypeError, "separator must be a String, nil or an Integer limit (got #{separator.inspect})"
    end

    # Paragraph mode: the newlines before a paragraph are not part of it.
    # Returns +searched+, less the newlines dropped.
    def skip_newlines(searched)
      start = offset = @offset
      offset += 1 while @buffer.getbyte(offset) == LF
      return searched if offset == start

      consume_to(offset)
      [searched - (offset - start), 0].max
    end

    # Reads more into the buffer; false at end of file.
    def fill(timeout)
      chunk = read_chunk(CHUNK, timeout) or return false
      if @buffer.empty?
        @buffer = chunk # the chunk is ours: no copy
      else
        # What was handed out goes now, once per read, not once per line.
        @buffer = @buffer.byteslice(@offset, @buffer.bytesize - @offset) unless @offset.zero?
        @buffer << chunk
        @offset = 0
      end
      true
    end

    # The next +length+ bytes of the buffer (all of it if fewer). When that
    # is the whole buffer it is handed over as is (no copy, and no capacity
    # left behind on an idle connection).
    def take(length)
      buffer = @buffer
      offset = @offset
      rest = buffer.bytesize - offset
      if length < rest
        @offset = offset + length
        return buffer.byteslice(offset, length)
      end
      @buffer = +EMPTY
      @offset = 0
      offset.zero? ? buffer : buffer.byteslice(offset, rest)
    end
  end
end
