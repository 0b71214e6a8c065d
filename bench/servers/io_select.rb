# frozen_string_literal: true

# A plain IO.select loop over every socket, no library. Sockets with unsent
# data are selected for writing instead of reading until they catch up.

require "socket"
require_relative "../support/bench_server"

port, mode = BenchServer.options

listener = TCPServer.new(BenchServer::HOST, port)
pending = {} # socket => request bytes not answered yet (http)
unsent = {}  # socket => bytes the kernel has not taken yet
readers = [listener]
writers = []

close = lambda do |socket|
  readers.delete(socket)
  writers.delete(socket)
  pending.delete(socket)
  unsent.delete(socket)
  socket.close
end

send_data = lambda do |socket, data|
  written = socket.write_nonblock(data, exception: false)
  written = 0 if written == :wait_writable
  return if written == data.bytesize

  unsent[socket] = data.byteslice(written, data.bytesize - written)
  readers.delete(socket)
  writers << socket
end

BenchServer.ready!
loop do
  readable, writable = IO.select(readers, writers)
  readable.each do |socket|
    if socket.equal?(listener)
      while (client = listener.accept_nonblock(exception: false)) != :wait_readable
        client.setsockopt(:TCP, :NODELAY, true)
        readers << client
        pending[client] = +""
      end
      next
    end
    data = socket.read_nonblock(BenchServer::READ_SIZE, exception: false)
    next if data == :wait_readable
    next close.call(socket) if data.nil?

    reply = BenchServer.reply(mode, data, pending[socket])
    send_data.call(socket, reply) unless reply.empty?
  rescue SystemCallError, IOError
    close.call(socket)
  end
  writable.each do |socket|
    data = unsent.delete(socket)
    writers.delete(socket)
    readers << socket
    send_data.call(socket, data)
  rescue SystemCallError, IOError
    close.call(socket)
  end
end
