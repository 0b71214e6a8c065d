# frozen_string_literal: true

require_relative "runner"

module Evix
  module Examples
    # A key-value server speaking one command per line, one reply per line:
    #
    #   SET key value     -> OK
    #   GET key           -> value, or (nil)
    #   DEL key           -> 1 if the key existed, else 0
    #   EXPIRE key secs   -> 1 if the key exists (it goes away after secs), else 0
    #   TTL key           -> seconds left (rounded up), -1 without expiry, -2 without key
    #
    # Each expiring key has one loop timer; SET and DEL cancel it.
    class KV
      include Runner

      MAX_LINE = 64 * 1024 # bytes; a longer line is cut into pieces, so memory per client stays bounded
      ARITY = { "SET" => 2, "GET" => 1, "DEL" => 1, "EXPIRE" => 2, "TTL" => 1 }.freeze

      def initialize(host: "127.0.0.1", port: 7002)
        @host = host
        @port = port
        @data = {}
        @expiries = {} # key => [timer, deadline]
      end

      # @return [Evix::TCPServer]
      def start(evloop)
        @loop = evloop
        Evix::TCPServer.new(evloop, @host, @port) do |client|
          client.each_line("\n", MAX_LINE) do |line|
            reply = execute(line.split)
            client.write("#{reply}\n") if reply
          end
        end
      end

      # @param words [Array<String>] a command and its arguments
      # @return [String, nil] the reply (nil for a blank line)
      def execute(words)
        return if words.empty?

        command = words.first.upcase
        arity = ARITY[command]
        return "ERR unknown command" unless arity
        return "ERR wrong number of arguments" unless words.size == arity + 1

        key, argument = words.drop(1)
        case command
        when "SET" then set(key, argument)
        when "GET" then @data.fetch(key, "(nil)")
        when "DEL" then del(key)
        when "EXPIRE" then expire(key, argument)
        when "TTL" then ttl(key)
        end
      end

      private

      def set(key, value)
        persist(key)
        @data[key] = value
        "OK"
      end

      def del(key)
        persist(key)
        @data.delete(key) ? "1" : "0"
      end

      def expire(key, seconds)
        delay = Float(seconds, exception: false)
        return "ERR value is not a number" unless delay&.finite?
        return "0" unless @data.key?(key)

        persist(key)
        return del(key) unless delay.positive?

        timer = @loop.add_timer(delay) do
          @expiries.delete(key)
          @data.delete(key)
        end
        @expiries[key] = [timer, now + delay]
        "1"
      end

      def ttl(key)
        return "-2" unless @data.key?(key)

        _timer, deadline = @expiries[key]
        return "-1" unless deadline

        [(deadline - now).ceil, 0].max.to_s
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
