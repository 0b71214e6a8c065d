# frozen_string_literal: true

# Thread per connection: blocking accept, readpartial and write, one Ruby
# thread for each client.

require "socket"
require_relative "../support/bench_server"

port, mode = BenchServer.options

def serve(socket, mode)
  pending = +""
  loop do
    reply = BenchServer.reply(mode, socket.readpartial(BenchServer::READ_SIZE), pending)
    socket.write(reply) unless reply.empty?
  end
rescue SystemCallError, IOError # EOFError is an IOError
  nil
ensure
  socket.close
end

server = TCPServer.new(BenchServer::HOST, port)
BenchServer.ready!
loop do
  socket = server.accept
  socket.setsockopt(:TCP, :NODELAY, true)
  Thread.new(socket) { |client| serve(client, mode) }
end
