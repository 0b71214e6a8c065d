# frozen_string_literal: true

module Evix
  # evix's HTTP/1.1 server for Rack apps (`evix serve`, `rackup -s evix`,
  # Evix::HTTP::Server). The request head and a chunked body are parsed in
  # Rust (Evix::HTTP::Parser, Evix::HTTP::ChunkedDecoder, defined by the
  # extension); the rest is here: the connection's request loop, rack.input,
  # the response, the runner with its signals and workers.
  module HTTP
    # A request the server refuses while reading it (a malformed or too
    # large chunked body): answered with #status, then the connection closes.
    class RequestError < Evix::Error
      # @return [Integer] the HTTP status of the answer
      attr_reader :status

      # @param status [Integer]
      # @param reason [String]
      def initialize(status, reason)
        @status = status
        super(reason)
      end
    end
  end
end

require "stringio"
require_relative "http/limits"
require_relative "http/response"
require_relative "http/input"
require_relative "http/stream"
require_relative "http/access_log"
require_relative "http/connection"
require_relative "http/server"
require_relative "http/runner"
