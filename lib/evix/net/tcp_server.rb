# frozen_string_literal: true

require "socket"
require_relative "server"
require_relative "address"
require_relative "listener"

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
    # @raise [TypeError] for a loop that is not an Evix::Loop, a host that is
    #   not a String or nil, a port or backlog that is not an Integer, a
    #   reuse_port that is not true or false, an ssl_context that is not an
    #   SSLContext
    # @raise [ArgumentError] for an empty host, a port out of range, a
    #   backlog below 1, a negative or non-finite idle_timeout, no block, a
    #   socket that is not listening, or a port given with one
    # @raise [SocketError] for a host name that does not resolve (the
    #   message names host and port)
    # @raise [Evix::ClosedError] for a closed loop
    def initialize(loop, host, port = nil, backlog: 1024, reuse_port: false, idle_timeout: nil,
                   ssl_context: nil, handshake_timeout: nil, write_high_water: IO::WRITE_HIGH_WATER,
                   max_connections: nil, &handler)
      if ssl_context || handshake_timeout
        @tls = TLS::Acceptor.new(ssl_context, handshake_timeout)
        handler &&= @tls.with_handshake(handler)
      end
      if host.is_a?(::BasicSocket)
        @adopted = Net::Listener.check_listening(host, port)
      else
        @host = Net::Address.check_host(host)
        @port = Net::Address.check_port(port)
      end
      @backlog = Net::Listener.check_backlog(backlog)
      unless [true, false].include?(reuse_port)
        raise TypeError, "reuse_port must be true or false (got #{reuse_port.inspect})"
      end

      @reuse_port = reuse_port
      super(loop, idle_timeout: idle_timeout, write_high_water: write_high_water, max_connections: max_connections,
                  &handler)
    end

    # @return [Integer] the bound port
    def port
      @local_address.ip_port
    end

    private

    # An adopted listener stays open: it is the caller's (Evix::Workers').
    def abandon_listener
      super unless @adopted
    end

    def listen
      @adopted || Net::Listener.open_tcp(@host, @port, backlog: @backlog, reuse_port: @reuse_port)
    end

    def connection(socket)
      socket.setsockopt(:TCP, :NODELAY, true)
      @tls ? Evix::IO.new(@loop, @tls.wrap(socket), write_high_water: @write_high_water) : super
    end
  end
end
