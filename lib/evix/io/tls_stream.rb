# frozen_string_literal: true

module Evix
  module TLS
    # The Evix::IO that Evix::IO.new makes for an OpenSSL::SSL::SSLSocket (a
    # subclass chosen at construction, not a module extended onto each
    # instance: no singleton class per connection). The bytes go
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
    class Stream < IO
      # @return [OpenSSL::SSL::SSLSocket]
      attr_reader :ssl_socket

      # @param loop [Evix::Loop]
      # @param ssl_socket [OpenSSL::SSL::SSLSocket] over an open TCP socket
      # @param options [Hash] as for Evix::IO.new
      def initialize(loop, ssl_socket, **options)
        super
        @ssl_socket = ssl_socket
        @writers = nil # one writer at a time: a Semaphore, made on the first write
      end

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
        if !@io.closed? && @ssl_socket.pending.positive?
          check_timeout(timeout, @timeout) # no wait checks it
          return true
        end

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
          if @streak >= FAIR_READS && ssl.pending.zero?
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
  end
end
