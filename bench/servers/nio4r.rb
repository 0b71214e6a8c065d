# frozen_string_literal: true

# nio4r: one NIO::Selector, a monitor per connection whose value is the
# connection's handler; no fibers. Interest switches to :w only while a write
# is partial.

require "socket"
require "nio"
require_relative "../support/bench_server"

port, MODE = BenchServer.options

# A client connection handled from the selector loop.
class Connection
  def initialize(selector, socket)
    @socket = socket
    @pending = +""
    @unsent = nil
    @monitor = selector.register(socket, :r)
    @monitor.value = self
  end

  def call
    @unsent ? on_writable : on_readable
  rescue SystemCallError, IOError
    close
  end

  private

  def on_readable
    data = @socket.read_nonblock(BenchServer::READ_SIZE, exception: false)
    return if data == :wait_readable
    return close if data.nil?

    reply = BenchServer.reply(MODE, data, @pending)
    send_data(reply) unless reply.empty?
  end

  def send_data(data)
    written = @socket.write_nonblock(data, exception: false)
    written = 0 if written == :wait_writable
    return if written == data.bytesize

    @unsent = data.byteslice(written, data.bytesize - written)
    @monitor.interests = :w
  end

  def on_writable
    written = @socket.write_nonblock(@unsent, exception: false)
    return if written == :wait_writable

    @unsent = @unsent.byteslice(written, @unsent.bytesize - written)
    return unless @unsent.empty?

    @unsent = nil
    @monitor.interests = :r
  end

  def close
    @monitor.close
    @socket.close
  end
end

selector = NIO::Selector.new
listener = TCPServer.new(BenchServer::HOST, port)
accept = lambda do
  loop do
    socket = listener.accept_nonblock(exception: false)
    break if socket == :wait_readable

    socket.setsockopt(:TCP, :NODELAY, true)
    Connection.new(selector, socket)
  end
end
selector.register(listener, :r).value = accept
BenchServer.ready!
loop do
  selector.select { |monitor| monitor.value.call }
end
