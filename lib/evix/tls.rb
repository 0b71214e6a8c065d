# frozen_string_literal: true

require "openssl"
require "ipaddr"

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

    # Made by Evix::IO.new for an OpenSSL::SSL::SSLSocket: the bytes go
    # through OpenSSL, the waits are on its TCP socket (Evix::IO#io), in the
    # direction OpenSSL asks for (a read may have to wait until the socket
    # is writable, a write until it is readable). Plaintext OpenSSL holds
    # already is read without waiting.
    #
    # One writer at a time (the others wait their turn), and only on the
    # loop's thread: after a write that would block, OpenSSL must be given
    # the same bytes again, so writes cannot interleave. If such a write is
    # cut short (timeout, cancellation), the connection is closed: its TLS
    # stream cannot go on.
    module Stream
      # @return [OpenSSL::SSL::SSLSocket]
      attr_reader :ssl_socket

      # The server's half of the handshake.
      # @param timeout [Numeric, nil] seconds for the whole handshake
      # @return [self]
      # @raise [OpenSSL::SSL::SSLError] the handshake failed
      # @raise [Evix::TimeoutError] it took longer than +timeout+
      def accept_tls(timeout: HANDSHAKE_TIMEOUT)
        handshake(:accept_nonblock, timeout)
      end

      # The client's half of the handshake (set the SSLSocket's +hostname+
      # first for SNI). Checks no certificate name: see
      # OpenSSL::SSL::SSLSocket#post_connection_check.
      # @param timeout [Numeric, nil] seconds for the whole handshake
      # @return [self]
      # @raise [OpenSSL::SSL::SSLError] the handshake failed
      # @raise [Evix::TimeoutError] it took longer than +timeout+
      def connect_tls(timeout: HANDSHAKE_TIMEOUT)
        handshake(:connect_nonblock, timeout)
      end

      # Not over TLS: OpenSSL must see a record written again with the same
      # bytes, which a queue written behind the caller's back cannot promise.
      # @param _data [String]
      # @raise [Evix::Error] always
      def try_write(_data)
        raise Error, "Evix::IO#try_write is not available over TLS: use #write"
      end

      # Writes all of +data+ as TLS records (see Evix::IO#write).
      # @param data [#to_s]
      # @param timeout [Numeric, nil] seconds; default: the IO's timeout
      # @return [Integer] bytes of +data+ written
      # @raise [Evix::Error] when called from a thread other than the loop's
      def write(data, timeout: @timeout)
        check_timeout(timeout, @timeout)
        unless Thread.current == @thread
          raise Error, "a TLS Evix::IO is written on its loop's thread only (OpenSSL's state is not thread-safe)"
        end

        data = data.to_s
        (@writers ||= Semaphore.new(1)).acquire { write_records(data, timeout) }
        data.bytesize
      end

      # Waits until a read can return something: at once when OpenSSL holds
      # plaintext already.
      # @param timeout [Numeric, nil] seconds; default: the IO's timeout
      # @return [true]
      def wait_readable(timeout: @timeout)
        check_timeout(timeout, @timeout)
        return true if !@io.closed? && @ssl_socket.pending.positive?

        super
      end

      # Sends close_notify (without waiting: if the kernel will not take it
      # now it is not sent), then closes as Evix::IO#close does.
      # @return [nil]
      def close
        return super if @io.closed? || Thread.current != @thread

        # sysclose sends close_notify; with sync_close it would also close the
        # TCP socket, which Evix::IO#close does after the loop forgets it.
        @ssl_socket.sync_close = false
        @ssl_socket.sysclose
        super
      end

      private

      def handshake(step, timeout)
        check_timeout(timeout)
        deadline = timeout && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout)
        until (state = @ssl_socket.public_send(step, exception: false)).equal?(@ssl_socket)
          # Evix::TCPServer#shutdown's close_read: a connection still in its
          # handshake has nothing in flight to finish.
          raise ClosedError, "closed for reading during the TLS handshake" if @eof

          left = deadline && [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max
          wait_for(state, left)
        end
        self
      rescue TimeoutError
        raise TimeoutError, "TLS handshake timed out after #{timeout}s"
      rescue ::IOError
        raise ClosedError, "IO is closed" if @io.closed?

        raise
      end

      # Replaces Evix::IO's: the next chunk of plaintext, nil at end of file
      # (the peer's close_notify). A TCP close without close_notify is
      # OpenSSL's error (OpenSSL::SSL::SSLError, "unexpected eof while
      # reading") unless the context has OP_IGNORE_UNEXPECTED_EOF, and a
      # reset is Errno::ECONNRESET: either may have cut the data short.
      def read_chunk(maxlen, timeout)
        ssl = @ssl_socket
        until @eof
          # After FAIR_READS reads without a wait, wait once (at once if the
          # socket is readable) so that a peer that never stops sending does
          # not keep the loop; not while OpenSSL holds plaintext, which no
          # readiness of the socket would announce.
          if @streak >= Evix::IO::FAIR_READS && ssl.pending.zero?
            @streak = 0
            wait(READ, timeout)
            next
          end
          chunk = ssl.read_nonblock(maxlen, exception: false)
          return chunk_read(chunk) if chunk.is_a?(String)
          return unless chunk

          @streak = 0
          wait_for(chunk, timeout)
        end
        raise ClosedError, "IO is closed" if @io.closed?

        read_arrived(maxlen)
      rescue ::IOError
        raise ClosedError, "IO is closed" if @io.closed?

        raise
      end

      # After #close_read: the plaintext of what already arrived, without
      # waiting (see Evix::IO#close_read).
      def read_arrived(maxlen)
        return unless @arrived

        chunk = @ssl_socket.read_nonblock(maxlen, exception: false)
        return chunk if chunk.is_a?(String)

        @arrived = false
        nil
      end

      def chunk_read(chunk)
        @streak += 1
        @idle_timer&.again
        chunk
      end

      # With partial writes on (Ruby's default), each write_nonblock writes at
      # least one record.
      def write_records(data, timeout)
        retrying = false
        until data.empty?
          written = @ssl_socket.write_nonblock(data, exception: false)
          if written.is_a?(Integer)
            retrying = false
            data = data.byteslice(written, data.bytesize - written)
          else
            retrying = true
            wait_to_write_record(written, timeout)
          end
        end
      rescue ::IOError
        raise ClosedError, "IO is closed" if @io.closed?

        raise
      ensure
        close if retrying
      end

      # Waits in the direction OpenSSL asked for (:wait_readable or
      # :wait_writable), as a reader: #close_read ends a wait to read.
      def wait_for(state, timeout)
        wait(state == :wait_writable ? WRITE : READ, timeout)
      end

      # The same for a writer, whose wait to read #close_read must not end:
      # the write would try again at once, and again, until input came.
      def wait_to_write_record(state, timeout)
        return wait(WRITE, timeout) if state == :wait_writable

        @loop.wait_io(@io, READ, timeout) or finish_wait(timeout)
      end
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
