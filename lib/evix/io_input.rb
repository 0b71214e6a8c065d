# frozen_string_literal: true

module Evix
  # Evix::IO's input: buffering and line reading (#read, #read_exactly,
  # #readpartial, #gets, #each_line, #eof?), over the raw reads of
  # io_raw.rb. The buffer is @buffer from @offset on; a line is found with
  # one search from @offset and handed out with one byteslice, and what was
  # handed out is dropped once per read into the buffer, not once per line.
  class IO
    NEWLINE = "\n"
    PARAGRAPH = "\n\n"
    CR = "\r".ord
    LF = "\n".ord
    CHOMP = { chomp: true }.freeze
    private_constant :NEWLINE, :PARAGRAPH, :CR, :LF, :CHOMP

    # Reads up to +maxlen+ bytes: what is buffered, else what the next read
    # gets; nil at end of file.
    # @param maxlen [Integer] not negative
    # @param timeout [Numeric, nil]
    # @return [String, nil]
    # @raise [ArgumentError] a negative maxlen, a bad timeout
    # @raise [Evix::TimeoutError, Evix::ClosedError]
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
    #
    # The keywords arrive as a trailing positional Hash (+keywords+, or in
    # the place of +separator+ or +limit+): on Ruby 3.1 a method with keyword
    # parameters costs about 500 instructions more a call, a sixth of a
    # line's whole cost, and the usual call passes none.
    def gets(separator = $INPUT_RECORD_SEPARATOR, limit = nil, keywords = nil)
      # The usual call on busy input: a whole line is already buffered. One
      # native call finds it and copies it out (ext/evix/src/ruby/io.rs):
      # String#index and #byteslice would cost more than IO#gets does. (A
      # Hash in the place of separator or limit gets nil from it.)
      if keywords.nil? && (line = buffered_line(buffer = @buffer, offset = @offset, separator, limit, false))
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
      gets_with_keywords(separator, limit, keywords)
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
      while true # rubocop:disable Style/InfiniteLoop -- Kernel#loop adds a C frame under a parked fiber
        if !@buffer.empty? && (used = yield @buffer, @offset)
          consume_to(@offset + used) unless used.negative?
          return used
        end
        if timeout
          deadline ||= Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise TimeoutError, "IO operation timed out after #{timeout}s" unless left.positive?
        end
        return nil unless fill(left)
      end
    end

    private

    # #gets with keywords, or with nothing to hand out at once.
    # rubocop:disable Metrics
    def gets_with_keywords(separator, limit, keywords)
      if keywords.nil? && separator.is_a?(Hash)
        keywords = separator
        separator = $INPUT_RECORD_SEPARATOR
      elsif keywords.nil? && limit.is_a?(Hash)
        keywords = limit
        limit = nil
      end
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

      if (line = buffered_line(@buffer, @offset, separator, limit, chomp))
        offset = @offset + line.size
        # A chomped line leaves its separator behind it, and the "\r" before a "\n".
        offset += separator == NEWLINE && @buffer.getbyte(offset) == CR ? 2 : separator.bytesize if chomp
        consume_to(offset)
        return line
      end
      read_line(separator, limit, timeout, chomp)
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

    # #gets when the line is not all buffered yet, or for a limit, paragraph
    # or nil separator. The search goes on from where the last one stopped
    # (+scanned+ bytes after @offset hold no separator): no byte is looked
    # at twice however many reads a long line takes.
    # rubocop:disable Metrics
    def read_line(separator, limit, timeout, chomp)
      separator, limit = line_arguments(separator, limit)
      paragraph = separator&.empty?
      separator = PARAGRAPH if paragraph
      scanned = 0
      while true # rubocop:disable Style/InfiniteLoop -- Kernel#loop adds a C frame under a parked fiber
        skip_newlines if paragraph
        buffered = @buffer.bytesize - @offset
        if separator && (at = @buffer.index(separator, @offset + scanned))
          length = at + separator.bytesize - @offset
          return take_line(length, chomp && separator) if limit.nil? || length <= limit
        end
        return take(limit) if limit && buffered >= limit

        scanned = separator ? [buffered - separator.bytesize + 1, 0].max : buffered
        next if fill(timeout)

        # End of file: the rest, which does not end with the separator.
        return @buffer.empty? ? nil : take(@buffer.bytesize - @offset)
      end
    end
    # rubocop:enable Metrics

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

    # The first +length+ bytes, which end with +separator+: without it when
    # +separator+ is given (chomp).
    def take_line(length, separator)
      start = @offset
      buffer = @buffer
      line = take(length)
      return line unless separator

      stop = chomp_at(buffer, start, start + length - separator.bytesize, separator)
      line.byteslice(0, stop - start)
    end

    # Where a chomped line that starts at +start+ and whose separator starts
    # at +at+ ends: a "\n" separator takes a "\r" before it along, as
    # String#chomp("\n") does.
    def chomp_at(buffer, start, at, separator)
      at > start && separator == NEWLINE && buffer.getbyte(at - 1) == CR ? at - 1 : at
    end

    # Paragraph mode: the newlines before a paragraph are not part of it.
    def skip_newlines
      offset = @offset
      offset += 1 while @buffer.getbyte(offset) == LF
      return @offset = offset if offset < @buffer.bytesize

      @buffer = +EMPTY
      @offset = 0
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
