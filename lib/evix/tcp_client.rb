# frozen_string_literal: true

require "socket"
require "ipaddr"

module Evix
  # Outgoing TCP connections for tasks.
  module TCPClient
    module_function

    # Connects without blocking the loop and returns the connection as an
    # Evix::IO. A refused or unreachable peer raises the real errno (with
    # "host:port" in the message); no answer within +timeout+ raises
    # Evix::TimeoutError. Host names are resolved on a helper thread.
    # @return [Evix::IO]
    def connect(loop, host, port, timeout: nil)
      raise Error, "Evix::TCPClient.connect must be called inside a task" unless Task.current

      address = resolve(loop, host, port)
      socket = Socket.new(address.afamily, :STREAM)
      client = Evix::IO.new(loop, socket)
      establish(client, socket, address, "#{host}:#{port}", timeout)
      client
    rescue TimeoutError
      socket&.close
      raise TimeoutError, "connect to #{host}:#{port} timed out after #{timeout}s"
    rescue StandardError
      socket&.close
      raise
    end

    # @return [Addrinfo] the first TCP address for host:port
    def resolve(loop, host, port)
      return Addrinfo.tcp(host, port) if numeric?(host)

      fiber = Fiber.current
      result = nil
      Thread.new do
        result = begin
          Addrinfo.getaddrinfo(host, port, nil, :STREAM).first
        rescue StandardError => e
          e
        end
        loop.post { fiber.resume }
      end
      Fiber.yield
      raise result if result.is_a?(Exception)

      result
    end

    def numeric?(host)
      IPAddr.new(host)
      true
    rescue IPAddr::Error
      false
    end

    def establish(client, socket, address, name, timeout)
      status = socket.connect_nonblock(address, exception: false)
      return if status.zero?

      client.wait_writable(timeout: timeout)
      errno = socket.getsockopt(:SOCKET, :ERROR).int
      raise SystemCallError.new(name, errno) unless errno.zero?

      socket.setsockopt(:TCP, :NODELAY, true)
    end
  end
end
