# frozen_string_literal: true

require_relative "runner"

module Evix
  module Examples
    # A key-value server that speaks two protocols on the same port, chosen
    # per request by its first byte:
    #
    # - RESP, the Redis protocol (a request starting with `*`: an array of
    #   bulk strings), so `redis-cli` and `redis-benchmark` work against it;
    # - an inline protocol for people at a terminal (`nc`, `telnet`): one
    #   command per line, words split on spaces, one reply per line.
    #
    #   PING [message]              -> PONG, or the message
    #   SET key value [EX s|PX ms] [NX|XX] -> OK (nil when NX/XX says no)
    #   GET key                     -> value, or nil ("(nil)" inline)
    #   DEL key [key ...]           -> how many existed
    #   EXPIRE key seconds          -> 1 if the key exists (0 removes it now), else 0
    #   TTL key                     -> seconds left (rounded up), -1 without expiry, -2 without key
    #   INCR key                    -> the value plus one, as an integer (keeps the expiry)
    #   CONFIG GET name, COMMAND    -> what redis-benchmark and redis-cli ask on connect
    #
    # Input is bounded before anything is allocated for it: a request is at
    # most MAX_REQUEST bytes and MAX_ARGS words, a value at most MAX_VALUE
    # bytes. A value or an inline line over its limit gets an error reply and
    # the connection goes on (nothing is stored, never a truncated value); a
    # RESP request that breaks the protocol or its limits gets an error reply
    # and that connection is closed, since what follows cannot be framed.
    #
    # Each expiring key has one loop timer; SET and DEL cancel it.
    class KV
      include Runner

      MAX_VALUE = 1024 * 1024 # bytes in a value
      MAX_REQUEST = MAX_VALUE + (64 * 1024) # bytes in a request: room for a full value, a key and options
      MAX_ARGS = 1024 # words in a request
      MAX_TTL = 100 * 365 * 24 * 3600 # seconds: longer expiries are surely mistakes
      INT64 = (-(2**63)...(2**63)) # what INCR counts in, as Redis does
      ARITY = { # command => (fewest arguments..most); an endless range has no most
        "PING" => 0..1, "SET" => 2.., "GET" => 1..1, "DEL" => 1.., "EXPIRE" => 2..2, "TTL" => 1..1,
        "INCR" => 1..1, "CONFIG" => 1.., "COMMAND" => 0..
      }.freeze
      # The header lines of RESP: an array's count, a bulk string's length (at most 10 digits).
      HEADERS = { "*" => /\A\*\d{1,10}\r\n\z/, "$" => /\A\$\d{1,10}\r\n\z/ }.freeze
      # CONFIG GET answers for what redis-benchmark asks; anything else is an empty list.
      CONFIG = { "save" => "", "appendonly" => "no" }.freeze

      # A simple-string reply (`+OK`): a status, not data.
      Status = Struct.new(:text)
      # An error reply (`-ERR ...`).
      ErrorReply = Struct.new(:message)
      # Raised for a RESP request that cannot be framed; the connection closes.
      class ProtocolError < StandardError; end

      OK = Status.new("OK")
      PONG = Status.new("PONG")

      def initialize(host: "127.0.0.1", port: 7002, verbose: false)
        @host = host
        @port = port
        @verbose = verbose
        @data = {}
        @expiries = {} # key => [timer, deadline]
      end

      # @return [Evix::TCPServer]
      def start(loop)
        @loop = loop
        Evix::TCPServer.new(loop, @host, @port) { |client| logged(client) { serve(client) } }
      end

      # Runs one command.
      # @param words [Array<String>] the command and its arguments
      # @return [String, Integer, Array, Status, ErrorReply, nil] the reply: a
      #   String is data (a bulk string), nil is the null reply
      def execute(words)
        command = words.first.to_s.upcase
        arity = ARITY[command]
        # Echoed as Redis does: cut short, and on one line (a CR or LF would break the reply's framing).
        return ErrorReply.new("ERR unknown command '#{words.first.to_s[0, 64].tr("\r\n", "  ")}'") unless arity
        unless arity.cover?(words.size - 1)
          return ErrorReply.new("ERR wrong number of arguments for '#{command.downcase}' command")
        end

        dispatch(command, *words.drop(1))
      end

      # The reply as RESP.
      # @return [String]
      def self.resp(reply)
        case reply
        when String then "$#{reply.bytesize}\r\n#{reply}\r\n"
        when Integer then ":#{reply}\r\n"
        when nil then "$-1\r\n"
        when Status then "+#{reply.text}\r\n"
        when ErrorReply then "-#{reply.message}\r\n"
        when Array then "*#{reply.size}\r\n#{reply.map { |item| resp(item) }.join}"
        end
      end

      # The reply as one line of the inline protocol.
      # @return [String]
      def self.inline(reply)
        case reply
        when nil then "(nil)"
        when Status then reply.text
        when ErrorReply then reply.message
        when Array then reply.empty? ? "(empty array)" : reply.map { |item| inline(item) }.join(" ")
        else reply.to_s
        end
      end

      private

      # rubocop:disable Metrics/CyclomaticComplexity
      def dispatch(command, key = nil, *rest)
        case command
        when "PING" then key || PONG
        when "SET" then set(key, *rest)
        when "GET" then @data[key]
        when "DEL" then [key, *rest].count { |each| del(each) }
        when "EXPIRE" then expire(key, rest.first)
        when "TTL" then ttl(key)
        when "INCR" then incr(key)
        when "CONFIG" then config(key, rest)
        when "COMMAND" then [] # redis-cli asks for command docs; it has its own
        end
      end
      # rubocop:enable Metrics/CyclomaticComplexity

      # --- the connection -------------------------------------------------------------------

      def serve(client)
        while (line = client.gets("\n", MAX_REQUEST))
          if line.start_with?("*")
            words = read_array(client, line)
            client.write(KV.resp(execute(words))) unless words.empty? # Redis ignores an empty array too
          else
            reply = inline_reply(client, line)
            client.write("#{reply}\n") if reply
          end
        end
      rescue ProtocolError => e
        client.write(KV.resp(ErrorReply.new("ERR Protocol error: #{e.message}")))
      rescue EOFError
        nil # the client left in the middle of a request
      end

      # The reply line to an inline request; nil for a blank line.
      def inline_reply(client, line)
        if line.bytesize >= MAX_REQUEST && !line.end_with?("\n")
          skip_line(client)
          return "ERR request longer than #{MAX_REQUEST} bytes"
        end
        words = line.split
        return if words.empty?
        return "ERR more than #{MAX_ARGS} words" if words.size > MAX_ARGS

        KV.inline(execute(words))
      end

      # Reads and drops the rest of an over-long line, a piece at a time.
      def skip_line(client)
        while (piece = client.gets("\n", MAX_REQUEST))
          break if piece.end_with?("\n")
        end
      end

      # The words of a RESP request: `*N\r\n` (already read), then N bulk
      # strings `$LEN\r\n...\r\n`. Every length is checked before the bytes
      # it announces are read.
      def read_array(client, header)
        budget = MAX_REQUEST
        Array.new(length(header, "*", MAX_ARGS)) do
          size = length(client.gets("\n", 32), "$", budget)
          budget -= size
          bulk = client.read_exactly(size + 2) or raise EOFError
          raise ProtocolError, "a bulk string does not end in CRLF" unless bulk.end_with?("\r\n")

          bulk.chomp!("\r\n")
        end
      end

      # The length in a `*N` or `$N` header line (+type+ is `*` or `$`), at most +max+.
      def length(line, type, max)
        raise EOFError unless line

        # match? makes no MatchData: this runs for every word of every request.
        unless line.match?(HEADERS.fetch(type))
          raise ProtocolError, "expected '#{type}' and a length, got #{line[0, 20].inspect}"
        end

        size = line.byteslice(1, 10).to_i # to_i stops at the CR
        raise ProtocolError, "a length of #{size} is over the limit of #{max}" if size > max

        size
      end

      # --- the commands ---------------------------------------------------------------------

      def set(key, value, *options)
        return ErrorReply.new("ERR value longer than #{MAX_VALUE} bytes") if value.bytesize > MAX_VALUE

        seconds, condition = expiry_and_condition(options)
        return ErrorReply.new(seconds) if seconds.is_a?(String)

        exists = @data.key?(key)
        return if (condition == "NX" && exists) || (condition == "XX" && !exists) # the null reply: not set

        persist(key)
        @data[key] = value
        expire_in(key, seconds) if seconds
        OK
      end

      # [seconds or nil, "NX"/"XX" or nil], or [an error message].
      def expiry_and_condition(options)
        seconds = condition = nil
        until options.empty?
          option = options.shift.upcase
          case option
          when "EX", "PX"
            time = duration(options.shift, option == "EX" ? 1 : 1000)
            return ["ERR invalid expire time in 'set' command"] unless time&.positive? && !seconds

            seconds = time
          when "NX", "XX"
            return ["ERR syntax error"] if condition

            condition = option
          else return ["ERR syntax error"]
          end
        end
        [seconds, condition]
      end

      def del(key)
        persist(key)
        @data.delete(key) ? true : false
      end

      def expire(key, text)
        seconds = duration(text)
        return ErrorReply.new("ERR seconds must be a number from 0 to #{MAX_TTL}") unless seconds
        return 0 unless @data.key?(key)

        persist(key)
        seconds.positive? ? expire_in(key, seconds) : del(key)
        1
      end

      def ttl(key)
        return -2 unless @data.key?(key)

        _timer, deadline = @expiries[key]
        return -1 unless deadline

        [(deadline - now).ceil, 0].max
      end

      def incr(key)
        text = @data.fetch(key, "0")
        number = Integer(text, 10) if text.match?(/\A-?\d{1,19}\z/) # the pattern keeps Integer() cheap
        return ErrorReply.new("ERR value is not an integer or out of range") unless number && INT64.cover?(number)
        return ErrorReply.new("ERR increment or decrement would overflow") unless INT64.cover?(number + 1)

        @data[key] = (number + 1).to_s # the expiry stays, as in Redis
        number + 1
      end

      def config(subcommand, names)
        return ErrorReply.new("ERR only CONFIG GET is supported") unless subcommand.casecmp?("GET")

        names.flat_map { |name| CONFIG.key?(name) ? [name, CONFIG[name]] : [] }
      end

      # --- expiry ---------------------------------------------------------------------------

      # +text+ (a number of units, 1000 for milliseconds) in seconds, if it is
      # a number from 0 to MAX_TTL; else nil.
      def duration(text, units = 1)
        number = Float(text.to_s, exception: false)
        number /= units if number
        number if number&.between?(0, MAX_TTL)
      end

      def expire_in(key, seconds)
        timer = @loop.add_timer(seconds) do
          @expiries.delete(key)
          @data.delete(key)
        end
        @expiries[key] = [timer, now + seconds]
      end

      # Drops the key's expiry, if it has one.
      def persist(key)
        timer, = @expiries.delete(key)
        timer&.cancel
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
