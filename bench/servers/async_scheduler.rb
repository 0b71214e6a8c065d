# frozen_string_literal: true

# Plain ::TCPServer/::TCPSocket code under async 1.30's Fiber::Scheduler (the
# reactor sets it inside Async {}); the same code as evix_scheduler.rb.

require "socket"
require "async"
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

Console.logger.off!
Async do
  server = TCPServer.new(BenchServer::HOST, port)
  BenchServer.ready!
  loop do
    socket = server.accept
    socket.setsockopt(:TCP, :NODELAY, true)
    Fiber.schedule { serve(socket, mode) }
  end
end
