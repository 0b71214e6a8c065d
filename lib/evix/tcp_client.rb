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
    # +write_high_water+ is the connection's Evix::IO#write_high_water.
    # @return [Evix::IO]
    def connect(loop, host, port, timeout: nil, write_high_water: IO::WRITE_HIGH_WATER)
      raise Error, "Evix::TCPClient.connect must be called inside a task" unless Task.current

      IO.high_water(write_high_water)

      deadline = timeout && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout)
      addresses = resolve(loop, host, port)
      # Like TCPSocket: try each address in turn, report the last failure.
      addresses.each_with_index do |address, index|
        return attempt(loop, address, "#{host}:#{port}", deadline, write_high_water)
      rescue SystemCallError
        raise if index == addresses.size - 1
      end
    rescue TimeoutError
      raise TimeoutError, "connect to #{host}:#{port} timed out after #{timeout}s"
    end

    # @return [Array<Addrinfo>] the TCP addresses for host:port (resolved on
    #   the offload pool unless +host+ is numeric)
    def resolve(loop, host, port)
      return [Addrinfo.tcp(host, port)] if numeric?(host)

      loop.offload { Addrinfo.getaddrinfo(host, port, nil, :STREAM) }
    end

    def attempt(loop, address, name, deadline, write_high_water)
      socket = Socket.new(address.afamily, :STREAM)
      client = Evix::IO.new(loop, socket, write_high_water: write_high_water)
      establish(client, socket, address, name, deadline)
      client
    rescue StandardError, CancelledError
      socket&.close
      raise
    end

    def numeric?(host)
      IPAddr.new(host)
      true
    rescue IPAddr::Error
      false
    end

    def establish(client, socket, address, name, deadline)
      if socket.connect_nonblock(address, exception: false) == :wait_writable
        timeout = deadline && [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max
        client.wait_writable(timeout: timeout)
        errno = socket.getsockopt(:SOCKET, :ERROR).int
        raise SystemCallError.new(name, errno) unless errno.zero?
      end
      socket.setsockopt(:TCP, :NODELAY, true)
    end

    private_class_method :numeric?, :attempt, :establish
  end
end
