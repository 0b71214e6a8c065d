# frozen_string_literal: true

# evix at the callback level: Evix::Loop with a persistent READ watcher per
# connection, read_nonblock/write_nonblock in the callback, no fibers.

require "socket"
require "evix"
require_relative "../support/bench_server"

port, MODE = BenchServer.options

# One client connection: reads while the kernel takes what it writes; when a
# write is partial it stops reading and waits for WRITE until caught up.
class Connection
  def initialize(evloop, socket)
    @loop = evloop
    @socket = socket
    @pending = +""
    @unsent = nil
    @watcher = watch_read
  end

  private

  def watch_read
    @loop.add_io(@socket, Evix::READ) { on_readable }
  end

  def on_readable
    data = @socket.read_nonblock(BenchServer::READ_SIZE, exception: false)
    return if data == :wait_readable
    return close if data.nil?

    send_data(BenchServer.reply(MODE, data, @pending))
  rescue SystemCallError
    close
  end

  def send_data(data)
    return if data.empty?

    written = @socket.write_nonblock(data, exception: false)
    written = 0 if written == :wait_writable
    return if written == data.bytesize

    @unsent = data.byteslice(written, data.bytesize - written)
    @watcher.cancel
    @watcher = @loop.add_io(@socket, Evix::WRITE) { on_writable }
  end

  def on_writable
    written = @socket.write_nonblock(@unsent, exception: false)
    return if written == :wait_writable

    @unsent = @unsent.byteslice(written, @unsent.bytesize - written)
    return unless @unsent.empty?

    @watcher.cancel
    @watcher = watch_read
  rescue SystemCallError
    close
  end

  def close
    @watcher.cancel
    @socket.close
  end
end

evloop = Evix::Loop.new
listener = TCPServer.new(BenchServer::HOST, port)
evloop.add_io(listener, Evix::READ) do
  loop do
    socket = listener.accept_nonblock(exception: false)
    break if socket == :wait_readable

    socket.setsockopt(:TCP, :NODELAY, true)
    Connection.new(evloop, socket)
  end
end
BenchServer.ready!
evloop.run
