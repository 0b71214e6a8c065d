# frozen_string_literal: true

require "socket"

# Plain (blocking, non-evix) sockets that talk to evix servers and Evix::IO
# from the spec's side, and what the spec does with them while the loop runs.
module EvixPlainSockets
  # A blocking TCP client connected to host:port, optionally with small
  # kernel buffers (tracked: the after hook closes it).
  def tcp_client(port, host = "127.0.0.1", rcvbuf: nil, sndbuf: nil)
    address = Addrinfo.tcp(host, port)
    socket = Socket.new(address.afamily, :STREAM)
    track_io(socket)
    socket.setsockopt(:SOCKET, :RCVBUF, rcvbuf) if rcvbuf
    socket.setsockopt(:SOCKET, :SNDBUF, sndbuf) if sndbuf
    socket.connect(address)
    socket
  end

  # Reads what a socket has without blocking into +into+: :eof at end of file
  # (or reset), :open when nothing more is there now.
  def drain(socket, into)
    loop do
      chunk = socket.read_nonblock(65_536, exception: false)
      return :eof if chunk.nil?
      return :open if chunk == :wait_readable

      into << chunk
    end
  rescue Errno::ECONNRESET
    :eof
  end

  # Runs +evloop+ until +size+ bytes came on +socket+ (or end of file).
  def receive_bytes(evloop, socket, size)
    got = String.new(encoding: Encoding::BINARY)
    run_until(evloop) { drain(socket, got) == :eof || got.bytesize >= size }
    got
  end

  # Writes +message+ on +socket+ and runs +evloop+ until it came back.
  def round_trip(evloop, socket, message)
    socket.write(message)
    receive_bytes(evloop, socket, message.bytesize)
  end

  # Writes into +socket+ until the kernel buffers between it and its peer are
  # full, so that the next write would block. @return [Integer] bytes written
  def fill_up(socket)
    chunk = "x" * 65_536
    total = 0
    loop do
      written = socket.write_nonblock(chunk, exception: false)
      return total if written == :wait_writable

      total += written
    end
  end

  # Makes the next close of +socket+ send RST instead of FIN.
  def abortive(socket)
    socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
    socket
  end
end

RSpec.configure { |config| config.include EvixPlainSockets }
