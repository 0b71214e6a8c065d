# frozen_string_literal: true

# async 2's buffered path: one task per connection reading and writing
# through an IO::Stream::Buffered (the io-stream gem async-http builds on),
# flushing after each reply. io-stream's default read size (256 KiB) is kept:
# it is what async-http users get (bench/PROFILE.md shows what it costs).

require "socket"
require "async"
require "io/stream"
require_relative "../support/bench_server"

port, mode = BenchServer.options

def serve(socket, mode)
  stream = IO::Stream::Buffered.wrap(socket)
  pending = +""
  while (data = stream.read_partial(BenchServer::READ_SIZE))
    reply = BenchServer.reply(mode, data, pending)
    stream.write(reply, flush: true) unless reply.empty?
  end
rescue SystemCallError, IOError
  nil
ensure
  stream&.close
end

Console.logger.off!
Async do |task|
  server = TCPServer.new(BenchServer::HOST, port)
  BenchServer.ready!
  loop do
    socket = server.accept
    socket.setsockopt(:TCP, :NODELAY, true)
    task.async { serve(socket, mode) }
  end
end
