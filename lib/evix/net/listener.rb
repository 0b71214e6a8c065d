# frozen_string_literal: true

require "socket"

module Evix
  module Net
    # Listening TCP sockets: opened for Evix::TCPServer and Evix::Workers, or
    # adopted (a worker's inherited one), with the checks of their options.
    # @api private
    module Listener
      # Where host nil listens, in order of preference: the dual-stack IPv6
      # wildcard, or IPv4's on a machine without IPv6.
      EVERY_ADDRESS = ["::", "0.0.0.0"].freeze

      # @param backlog [Object] listen(2)'s queue length
      # @return [Integer] +backlog+, checked
      # @raise [TypeError, ArgumentError] not a positive Integer
      def self.check_backlog(backlog)
        raise TypeError, "backlog must be an Integer (got #{backlog.inspect})" unless backlog.is_a?(Integer)
        raise ArgumentError, "backlog must be positive (got #{backlog})" unless backlog.positive?

        backlog
      end

      # @param listener [BasicSocket] a socket given in place of a host
      # @param port [Object] the port given with it
      # @return [BasicSocket] +listener+, if it listens and no port came with it
      # @raise [ArgumentError] a port, or a socket that does not listen
      def self.check_listening(listener, port)
        raise ArgumentError, "pass no port with a listening socket (got #{port.inspect})" unless port.nil?
        raise ArgumentError, "the socket given to Evix::TCPServer.new is not listening" unless
          listener.getsockopt(:SOCKET, :ACCEPTCONN).bool

        listener
      end

      # A listening socket on +host+ and +port+, both checked (see Address).
      # @param host [String, nil] nil: every address, IPv4 and IPv6 (see
      #   EVERY_ADDRESS; Ruby's ::TCPServer.new(nil, port) takes IPv4 only)
      # @param port [Integer]
      # @param backlog [Integer] listen(2) backlog
      # @param reuse_port [Boolean] set SO_REUSEPORT
      # @return [Socket]
      # @raise [SocketError] +host+ does not resolve (the message names host and port)
      def self.open_tcp(host, port, backlog:, reuse_port: false)
        if host
          address = begin
            Addrinfo.tcp(host, port)
          rescue SocketError => e
            raise SocketError, "#{host}:#{port}: #{e.message}", cause: nil
          end
          return bind(address, backlog, reuse_port)
        end

        begin
          bind(Addrinfo.tcp(EVERY_ADDRESS[0], port), backlog, reuse_port)
        rescue Errno::EAFNOSUPPORT, Errno::EADDRNOTAVAIL
          bind(Addrinfo.tcp(EVERY_ADDRESS[1], port), backlog, reuse_port) # no IPv6 on this machine
        end
      end

      def self.bind(address, backlog, reuse_port)
        socket = Socket.new(address.afamily, :STREAM)
        socket.setsockopt(:SOCKET, :REUSEADDR, true)
        socket.setsockopt(:SOCKET, :REUSEPORT, true) if reuse_port
        # The IPv6 wildcard takes IPv4 too, whatever net.ipv6.bindv6only says.
        socket.setsockopt(:IPV6, :V6ONLY, false) if address.ipv6? && address.ipv6_unspecified?
        socket.bind(address)
        socket.listen(backlog)
        socket
      rescue StandardError
        socket&.close
        raise
      end
      private_class_method :bind
    end
  end
end
