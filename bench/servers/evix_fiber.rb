# frozen_string_literal: true

# evix's fiber server: Evix::TCPServer runs one task per connection, and the
# handler is plain sequential code on an Evix::IO.

require "evix"
require_relative "../support/bench_server"

port, mode = BenchServer.options

evloop = Evix::Loop.new
Evix::TCPServer.new(evloop, BenchServer::HOST, port) do |client|
  pending = +""
  while (data = client.read(BenchServer::READ_SIZE))
    reply = BenchServer.reply(mode, data, pending)
    client.write(reply) unless reply.empty?
  end
end
BenchServer.ready!
evloop.run
