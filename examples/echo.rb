# frozen_string_literal: true

require_relative "runner"

module Evix
  module Examples
    # The fiber echo server: one task per connection, written as plain
    # sequential code. `read` returns nil at end of file; `write` sends the
    # whole buffer, suspending only this connection's fiber while the
    # client is slow, so memory stays bounded whatever the client does.
    class Echo
      include Runner

      # @param ssl_context [OpenSSL::SSL::SSLContext, nil] serve TLS with it
      # @param verbose [Boolean] log each connection on stderr
      def initialize(host: "127.0.0.1", port: 7000, ssl_context: nil, verbose: false)
        @host = host
        @port = port
        @ssl_context = ssl_context
        @verbose = verbose
      end

      # @return [Evix::TCPServer]
      def start(loop)
        Evix::TCPServer.new(loop, @host, @port, ssl_context: @ssl_context) do |client|
          logged(client) do
            while (data = client.read)
              client.write(data)
            end
          end
        end
      end
    end
  end
end
