# frozen_string_literal: true

# Plain ::TCPServer/::TCPSocket code run under evix's Fiber::Scheduler
# (Evix.run): blocking-looking accept/readpartial/write suspend only the
# calling fiber. bench/servers/async_scheduler.rb is the same code under
# async 1.30's scheduler.

require "socket"
require "evix"
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

Evix.run do
  server = TCPServer.new(BenchServer::HOST, port)
  BenchServer.ready!
  loop do
    socket = server.accept
    socket.setsockopt(:TCP, :NODELAY, true)
    Fiber.schedule { serve(socket, mode) }
  end
end
