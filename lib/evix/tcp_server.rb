# frozen_string_literal: true

require "socket"
require_relative "server"

module Evix
  # A TCP server running one task per connection (see Evix::Server for the
  # lifecycle: on_error, idle timeouts, #close, #shutdown). The block receives
  # each connection as an Evix::IO; the connection is closed when the block
  # ends.
  #
  # +host+ nil listens on every address of the machine, IPv4 and IPv6: one
  # dual-stack socket on "::" (IPV6_V6ONLY off), or "0.0.0.0" on a machine
  # without IPv6. Ruby's own TCPServer.new(nil, port) binds only the first
  # wildcard getaddrinfo offers, which on Linux is "0.0.0.0": IPv4 alone.
  # "::" given explicitly is dual-stack too (as Linux makes it by default);
  # "0.0.0.0" is IPv4 only, "::1" and "127.0.0.1" loopback of one family.
  class TCPServer < Server
    # Where +host+ nil listens, in order of preference.
    EVERY_ADDRESS = ["::", "0.0.0.0"].freeze

    # @param loop [Evix::Loop]
    # @param host [String, nil, BasicSocket] address to bind ("127.0.0.1",
    #   "::1", "0.0.0.0", "::", a host name); nil: every address, IPv4 and
    #   IPv6; or a socket already listening (an Evix::Workers worker's
    #   inherited listener), served as it is and closed by #close
    # @param port [Integer, nil] port, 0 to 65535 (0 picks a free one, see
    #   #port); nil with a listening socket
    # @param backlog [Integer] listen(2) backlog
    # @param reuse_port [Boolean] set SO_REUSEPORT (one listener per process)
    # @param idle_timeout [Numeric, nil] close connections with no input for
    #   this many seconds (finite, not negative)
    # @param ssl_context [OpenSSL::SSL::SSLContext, nil] serve TLS with this
    #   context (set up, and so frozen, here); the block gets each connection
    #   after its handshake, which fails to #on_error like any handler
    # @param handshake_timeout [Numeric, nil] seconds a TLS handshake may take
    #   (default Evix::TLS::HANDSHAKE_TIMEOUT)
    # @param write_high_water [Integer] each connection's Evix::IO#write_high_water
    # @param max_connections [Integer, nil] see Evix::Server#initialize
    # @yieldparam client [Evix::IO] each connection, in its own task; closed
    #   when the block returns
    # @raise [TypeError] for a host that is not a String or nil, a port that
    #   is not an Integer, an ssl_context that is not an SSLContext
    # @raise [ArgumentError] for an empty host, a port out of range, a
    #   negative or non-finite idle_timeout, no block, a socket that is not
    #   listening, or a port given with one
    def initialize(loop, host, port = nil, backlog: 1024, reuse_port: false, idle_timeout: nil,
                   ssl_context: nil, handshake_timeout: nil, write_high_water: IO::WRITE_HIGH_WATER,
                   max_connections: nil, &handler)
      if ssl_context || handshake_timeout
        @tls = TLS::Acceptor.new(ssl_context, handshake_timeout)
        handler &&= @tls.with_handshake(handler)
      end
      if host.is_a?(::BasicSocket)
        @adopted = TCPServer.check_listening(host, port)
      else
        @host = TCPServer.check_host(host)
        @port = TCPServer.check_port(port)
      end
      @backlog = backlog
      @reuse_port = reuse_port
      super(loop, idle_timeout: idle_timeout, write_high_water: write_high_water, max_connections: max_connections,
                  &handler)
    end

    # @return [Integer] the bound port
    def port
      @local_address.ip_port
    end

    # @api private
    # @param host [Object] TCPServer.new's +host+
    # @return [String, nil] +host+, checked
    def self.check_host(host)
      raise TypeError, "host must be a String or nil (got #{host.inspect})" unless host.nil? || host.is_a?(String)
      raise ArgumentError, "host must not be empty (nil listens on every address)" if host&.empty?

      host
    end

    # @api private
    # @param port [Object] TCPServer.new's +port+
    # @return [Integer] +port+, checked
    def self.check_port(port)
      raise ArgumentError, "a port is needed (or a listening socket in place of the host)" if port.nil?
      raise TypeError, "port must be an Integer (got #{port.inspect})" unless port.is_a?(Integer)
      raise ArgumentError, "port must be between 0 and 65535 (got #{port})" unless port.between?(0, 65_535)

      port
    end

    # @api private
    # @param listener [BasicSocket] TCPServer.new's +host+
    # @param port [Object] TCPServer.new's +port+
    # @return [BasicSocket] +listener+, if it listens and no port came with it
    def self.check_listening(listener, port)
      raise ArgumentError, "pass no port with a listening socket (got #{port.inspect})" unless port.nil?
      raise ArgumentError, "the socket given to Evix::TCPServer.new is not listening" unless
        listener.getsockopt(:SOCKET, :ACCEPTCONN).bool

      listener
    end

    # A listening socket on +host+ (nil: every address, see the class
    # comment) and +port+, both already checked.
    # @api private
    # @param host [String, nil]
    # @param port [Integer]
    # @param backlog [Integer] listen(2) backlog
    # @param reuse_port [Boolean] set SO_REUSEPORT
    # @return [Socket]
    def self.open_listener(host, port, backlog:, reuse_port: false)
      return bind(Addrinfo.tcp(host, port), backlog, reuse_port) if host

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

    private

    def listen
      @adopted || TCPServer.open_listener(@host, @port, backlog: @backlog, reuse_port: @reuse_port)
    end

    def connection(socket)
      socket.setsockopt(:TCP, :NODELAY, true)
      @tls ? Evix::IO.new(@loop, @tls.wrap(socket), write_high_water: @write_high_water) : super
    end
  end
end
