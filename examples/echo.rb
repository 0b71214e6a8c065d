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

      def initialize(host: "127.0.0.1", port: 7000)
        @host = host
        @port = port
      end

      # @return [Evix::TCPServer]
      def start(evloop)
        Evix::TCPServer.new(evloop, @host, @port) do |client|
          while (data = client.read)
            client.write(data)
          end
        end
      end
    end
  end
end
