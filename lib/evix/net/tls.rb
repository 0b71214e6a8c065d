# frozen_string_literal: true

require "openssl"
require "ipaddr"
require_relative "../io/tls_stream"

module Evix
  # TLS on Ruby's openssl: Evix::IO over an OpenSSL::SSL::SSLSocket
  # (TLS::Stream), the server side of Evix::TCPServer's +ssl_context:+
  # (TLS::Acceptor) and the client side of Evix::TCPClient.connect's
  # (TLS::Connector). Loaded on first use (+require "evix"+ does not load
  # openssl).
  module TLS
    # Seconds a handshake may take unless the caller says otherwise.
    HANDSHAKE_TIMEOUT = 10

    # Raises TypeError unless +context+ is an OpenSSL::SSL::SSLContext.
    # @api private
    # @return [OpenSSL::SSL::SSLContext]
    def self.context(context)
      return context if context.is_a?(OpenSSL::SSL::SSLContext)

      raise TypeError, "ssl_context must be an OpenSSL::SSL::SSLContext (got #{context.inspect})"
    end

    # The handshake timeout given, checked, or the default one.
    # @api private
    # @param seconds [Numeric, nil] nil: HANDSHAKE_TIMEOUT
    # @return [Numeric]
    def self.handshake_timeout(seconds)
      seconds.nil? ? HANDSHAKE_TIMEOUT : Arguments.seconds(seconds, "handshake_timeout")
    end

    # The trust anchors of the system (what OpenSSL's default paths hold),
    # for a client context that names none.
    # @api private
    # @return [OpenSSL::X509::Store]
    def self.default_cert_store
      @default_cert_store ||= OpenSSL::X509::Store.new.tap(&:set_default_paths)
    end

    # The server side of TLS for Evix::TCPServer: wraps each accepted socket
    # and runs its handshake in the connection's task.
    # @api private
    class Acceptor
      # @param context [OpenSSL::SSL::SSLContext] set up (and so frozen) here,
      #   so that a key that does not match its certificate raises now
      # @param handshake_timeout [Numeric, nil] nil: HANDSHAKE_TIMEOUT
      def initialize(context, handshake_timeout)
        raise ArgumentError, "handshake_timeout needs an ssl_context" unless context

        @context = TLS.context(context)
        @handshake_timeout = TLS.handshake_timeout(handshake_timeout)
        @context.setup
      end

      # @param socket [Socket] an accepted connection
      # @return [OpenSSL::SSL::SSLSocket]
      def wrap(socket)
        OpenSSL::SSL::SSLSocket.new(socket, @context)
      end

      # The server's block, run after the handshake in the connection's task
      # (a failed handshake is the connection's error, for Server#on_error).
      # @param handler [Proc]
      # @return [Proc]
      def with_handshake(handler)
        handshake_timeout = @handshake_timeout
        proc do |client|
          client.accept_tls(timeout: handshake_timeout)
          handler.call(client)
        end
      end
    end

    # The client side of TLS for Evix::TCPClient.connect.
    #
    # With +verify+ (the default) the server must prove it is +hostname+: a
    # context that does not verify yet (a new SSLContext is VERIFY_NONE) gets
    # VERIFY_PEER, and the system's trust anchors if it names none (no
    # +cert_store+, +ca_file+ or +ca_path+); after the handshake the
    # certificate must name +hostname+ (DNS name or IP address).
    # @api private
    class Connector
      # @param context [OpenSSL::SSL::SSLContext]
      # @param hostname [String] for SNI (unless it is an IP address) and the
      #   certificate check
      # @param verify [Boolean]
      # @param handshake_timeout [Numeric, nil] nil: HANDSHAKE_TIMEOUT
      def initialize(context, hostname, verify, handshake_timeout)
        @context = TLS.context(context)
        raise TypeError, "hostname must be a String (got #{hostname.inspect})" unless hostname.is_a?(String)
        raise TypeError, "verify must be true or false (got #{verify.inspect})" unless [true, false].include?(verify)

        @hostname = hostname
        @verify = verify
        @handshake_timeout = TLS.handshake_timeout(handshake_timeout)
        prepare_verification if verify
      end

      # Runs the handshake over a connected +tcp+ connection and returns the
      # TLS one; on failure +tcp+ is closed.
      # @param loop [Evix::Loop]
      # @param tcp [Evix::IO] a connected plain TCP connection
      # @param timeout [Numeric, nil] what is left of the connect's timeout
      # @return [Evix::IO]
      def handshake(loop, tcp, timeout)
        ssl = OpenSSL::SSL::SSLSocket.new(tcp.io, @context)
        ssl.hostname = @hostname unless ip_address?(@hostname) # SNI names hosts, never addresses
        client = Evix::IO.new(loop, ssl)
        client.connect_tls(timeout: timeout ? [timeout, @handshake_timeout].min : @handshake_timeout)
        ssl.post_connection_check(@hostname) if @verify
        client
      rescue StandardError, CancelledError
        client ? client.close : tcp.close
        raise
      end

      private

      def prepare_verification
        return if @context.verify_mode.to_i.anybits?(OpenSSL::SSL::VERIFY_PEER)

        if @context.frozen?
          raise ArgumentError, "ssl_context does not verify certificates (VERIFY_NONE) and is already set up: " \
                               "pass verify: false, or a context with VERIFY_PEER"
        end

        @context.verify_mode = OpenSSL::SSL::VERIFY_PEER
        return if @context.cert_store || @context.ca_file || @context.ca_path

        @context.cert_store = TLS.default_cert_store
      end

      def ip_address?(host)
        IPAddr.new(host)
        true
      rescue IPAddr::Error
        false
      end
    end
  end
end
