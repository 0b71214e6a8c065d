# frozen_string_literal: true

# async 1.30 the way async-io 1.x drives it: one task per connection, each
# socket wrapped in an Async::Wrapper; try the non-blocking call first and
# wait_readable/wait_writable only when it would block.

require "socket"
require "async"
require "async/wrapper"
require_relative "../support/bench_server"

port, mode = BenchServer.options

def write_all(wrapper, data)
  until data.empty?
    written = wrapper.io.write_nonblock(data, exception: false)
    if written == :wait_writable
      wrapper.wait_writable
    else
      data = data.byteslice(written, data.bytesize - written)
    end
  end
end

def serve(wrapper, mode)
  pending = +""
  loop do
    data = wrapper.io.read_nonblock(BenchServer::READ_SIZE, exception: false)
    case data
    when :wait_readable then wrapper.wait_readable
    when nil then break
    else write_all(wrapper, BenchServer.reply(mode, data, pending))
    end
  end
rescue SystemCallError, IOError
  nil
ensure
  wrapper.close
end

Console.logger.off!
Async do |task|
  server = TCPServer.new(BenchServer::HOST, port)
  listener = Async::Wrapper.new(server)
  BenchServer.ready!
  loop do
    listener.wait_readable
    loop do
      socket = server.accept_nonblock(exception: false)
      break if socket == :wait_readable

      socket.setsockopt(:TCP, :NODELAY, true)
      task.async { serve(Async::Wrapper.new(socket), mode) }
    end
  end
end
