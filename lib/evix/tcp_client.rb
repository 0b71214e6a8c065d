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
    #
    # With +ssl_context+ the connection is TLS: the handshake (SNI: +hostname+)
    # runs within what is left of +timeout+ and +handshake_timeout+, and with
    # +verify+ the server's certificate must chain to a trusted CA and name
    # +hostname+ (see Evix::TLS::Connector), else OpenSSL::SSL::SSLError.
    # @param ssl_context [OpenSSL::SSL::SSLContext, nil]
    # @param hostname [String, nil] the name the server must prove (default +host+)
    # @param verify [Boolean] false: check nothing beyond what the context does
    # @param handshake_timeout [Numeric, nil] default Evix::TLS::HANDSHAKE_TIMEOUT
    # @return [Evix::IO]
    # @raise [TypeError, ArgumentError] for TLS options that do not fit
    def connect(loop, host, port, timeout: nil, ssl_context: nil, hostname: nil, verify: true, handshake_timeout: nil)
      if ssl_context || hostname || handshake_timeout || verify != true
        raise ArgumentError, "hostname:, verify: and handshake_timeout: need an ssl_context:" unless ssl_context

        tls = TLS::Connector.new(ssl_context, hostname || host, verify, handshake_timeout)
      end
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      client = connect_tcp(loop, host, port, timeout)
      return client unless tls

      left = timeout && [timeout - (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started), 0].max
      tls.handshake(loop, client, left)
    end

    # The plain TCP connection of #connect.
    def connect_tcp(loop, host, port, timeout)
      raise Error, "Evix::TCPClient.connect must be called inside a task" unless Task.current

      deadline = timeout && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout)
      addresses = resolve(loop, host, port)
      # Like TCPSocket: try each address in turn, report the last failure.
      addresses.each_with_index do |address, index|
        return attempt(loop, address, "#{host}:#{port}", deadline)
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

    def attempt(loop, address, name, deadline)
      socket = Socket.new(address.afamily, :STREAM)
      client = Evix::IO.new(loop, socket)
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

    private_class_method :connect_tcp, :numeric?, :attempt, :establish
  end
end
