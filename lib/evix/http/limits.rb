# frozen_string_literal: true

module Evix
  module HTTP
    # The bounds of an Evix::HTTP::Server, each with its default and the
    # answer a request that passes it gets:
    #
    # - +max_request_line+ (8 KiB): bytes of the request line; 414
    # - +max_head+ (64 KiB): bytes of the whole request head; 431
    # - +max_headers+ (100): header fields in a request; 431
    # - +max_body+ (64 MiB): bytes of a request body; 413
    # - +max_chunk_line+ (1 KiB): bytes of a chunk-size line, extensions
    #   included; 400
    # - +header_timeout+ (10 s): seconds a connection's first request head
    #   may take to arrive; 408 and a close
    # - +keep_alive_timeout+ (20 s): seconds a kept-alive connection may
    #   wait for its next request head; closed without an answer
    # - +io_timeout+ (60 s): seconds a read of the body or a write of the
    #   response may wait for the client; the connection is closed
    # - +max_connections+ (1024): connections a server holds at once (each
    #   has at most one request in flight); past it, it stops accepting and
    #   the kernel's backlog holds the rest
    # - +input_memory+ (128 KiB): bytes of a body rack.input keeps in memory
    #   before it uses a Tempfile
    Limits = Struct.new(:max_request_line, :max_head, :max_headers, :max_body, :max_chunk_line,
                        :header_timeout, :keep_alive_timeout, :io_timeout, :max_connections, :input_memory,
                        keyword_init: true) do
      # Fills in the defaults and checks every value; raises ArgumentError
      # naming an unknown option, TypeError or ArgumentError naming a bad value.
      # @param options [Hash{Symbol => Numeric}]
      def initialize(**options)
        unknown = options.keys - Limits::DEFAULTS.keys
        raise ArgumentError, "unknown option#{"s" if unknown.size > 1}: #{unknown.join(", ")}" unless unknown.empty?

        super(**Limits::DEFAULTS, **options)
        each_pair do |name, value|
          if name.end_with?("_timeout")
            Evix::Arguments.seconds(value, name.to_s)
          else
            raise TypeError, "#{name} must be an Integer (got #{value.inspect})" unless value.is_a?(Integer)
            raise ArgumentError, "#{name} must be positive (got #{value})" unless value.positive?
          end
        end
        freeze
      end
    end

    class Limits
      # Every option and its default.
      DEFAULTS = {
        max_request_line: 8 * 1024, max_head: 64 * 1024, max_headers: 100, max_body: 64 * 1024 * 1024,
        max_chunk_line: 1024, header_timeout: 10, keep_alive_timeout: 20, io_timeout: 60,
        max_connections: 1024, input_memory: 128 * 1024
      }.freeze
    end
  end
end
