# frozen_string_literal: true

require "socket"
require "ipaddr"
require_relative "address"

module Evix
  # Outgoing TCP connections for tasks.
  module TCPClient
    # Seconds a connection attempt has before the next address is tried
    # alongside it (RFC 8305's "Connection Attempt Delay", 250 ms).
    ATTEMPT_DELAY = 0.25

    module_function

    # Connects without blocking the loop and returns the connection as an
    # Evix::IO. Host names are resolved on the loop's offload pool.
    #
    # Every address the name resolves to is tried, RFC 8305-style ("Happy
    # Eyeballs"): in getaddrinfo's order with IPv6 and IPv4 taking turns,
    # the next attempt starting as soon as one fails or when one has gone
    # +attempt_delay+ seconds without an answer; the first to connect wins
    # and the others are closed. When every address refuses, the last error
    # is raised (the real errno, with "host:port" in the message); when
    # +timeout+ passes first (resolution included), Evix::TimeoutError.
    # @param loop [Evix::Loop]
    # @param host [String] an address ("127.0.0.1", "::1") or a host name
    # @param port [Integer] 0 to 65535
    # @param timeout [Numeric, nil] seconds for the whole connect, at most
    #   (finite, not negative)
    # @param attempt_delay [Numeric] seconds before the next address is tried
    #   while an attempt goes on (finite, not negative)
    #
    # With +ssl_context+ the connection is TLS: the handshake (SNI: +hostname+)
    # runs within what is left of +timeout+ and +handshake_timeout+, and with
    # +verify+ the server's certificate must chain to a trusted CA and name
    # +hostname+ (see Evix::TLS::Connector), else OpenSSL::SSL::SSLError.
    # @param ssl_context [OpenSSL::SSL::SSLContext, nil]
    # @param hostname [String, nil] the name the server must prove (default +host+)
    # @param verify [Boolean] false: check nothing beyond what the context does
    # @param handshake_timeout [Numeric, nil] default Evix::TLS::HANDSHAKE_TIMEOUT
    # @param write_high_water [Integer] the connection's Evix::IO#write_high_water
    # @return [Evix::IO]
    # @raise [TypeError, ArgumentError] for a bad host, port, timeout or
    #   attempt_delay, or TLS options that do not fit
    def connect(loop, host, port, timeout: nil, attempt_delay: ATTEMPT_DELAY,
                ssl_context: nil, hostname: nil, verify: true, handshake_timeout: nil,
                write_high_water: IO::WRITE_HIGH_WATER)
      Arguments.open_loop(loop)
      IO.high_water(write_high_water)
      if ssl_context || hostname || handshake_timeout || verify != true
        raise ArgumentError, "hostname:, verify: and handshake_timeout: need an ssl_context:" unless ssl_context

        tls = TLS::Connector.new(ssl_context, hostname || host, verify, handshake_timeout)
      end
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      client = connect_tcp(loop, host, port, timeout, attempt_delay)
      client.write_high_water = write_high_water
      return client unless tls

      left = timeout && [timeout - (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started), 0].max
      tls.handshake(loop, client, left)
    end

    # The TCP connection of #connect (TLS aside).
    def connect_tcp(loop, host, port, timeout, attempt_delay)
      Net::Address.check_peer_host(host)
      Net::Address.check_port(port)
      timeout &&= Arguments.seconds(timeout, "timeout")
      Arguments.seconds(attempt_delay, "attempt_delay")
      raise Error, "Evix::TCPClient.connect must be called inside a task" unless Task.current

      deadline = timeout && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout)
      addresses = begin
        resolve_by(loop, host, port, deadline)
      rescue SocketError => e # raised on the offload thread: name the host, show the caller's frames
        raise SocketError, "#{host}:#{port}: #{e.message}", cause: nil
      end
      raise SocketError, "#{host}:#{port} resolved to no address" if addresses.empty?

      socket = Race.new(loop, interleave(addresses), "#{host}:#{port}", attempt_delay).run(deadline)
      connection(loop, socket)
    rescue TimeoutError
      raise TimeoutError, "connect to #{host}:#{port} timed out after #{timeout}s"
    end

    # @param loop [Evix::Loop] whose offload pool resolves a name
    # @param host [String]
    # @param port [Integer]
    # @return [Array<Addrinfo>] the TCP addresses for host:port (resolved on
    #   the offload pool unless +host+ is numeric)
    def resolve(loop, host, port)
      return [Addrinfo.tcp(host, port)] if numeric?(host)

      loop.offload { Addrinfo.getaddrinfo(host, port, nil, :STREAM) }
    end

    # #resolve, given up at +deadline+ (the pool thread finishes on its own).
    def resolve_by(loop, host, port, deadline)
      return resolve(loop, host, port) unless deadline && !numeric?(host)

      lookup = loop.spawn { resolve(loop, host, port) }
      lookup.wait(timeout: [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max)
    ensure
      lookup&.cancel
    end

    # The one step between the connected socket and the caller's Evix::IO
    # (the place a TLS wrap plugs in). Runs in the caller's task: it may wait.
    def connection(loop, socket)
      socket.setsockopt(:TCP, :NODELAY, true)
      Evix::IO.new(loop, socket)
    rescue StandardError, CancelledError
      socket.close
      raise
    end

    # RFC 8305 §4: the families take turns, the first address's one first.
    def interleave(addresses)
      first, other = addresses.partition { |address| address.afamily == addresses.first.afamily }
      Array.new([first.size, other.size].max) { |i| [first[i], other[i]] }.flatten.compact
    end

    def numeric?(host)
      IPAddr.new(host)
      true
    rescue IPAddr::Error
      false
    end

    private_class_method :connect_tcp, :numeric?, :resolve_by, :connection, :interleave

    # One connect: the attempts under way, each a non-blocking socket the
    # loop watches until it is writable (connected, or failed: SO_ERROR
    # says which). The Race owns every socket until it hands the winner
    # over; the others are closed when it ends, however it ends.
    class Race
      # @param loop [Evix::Loop]
      # @param addresses [Array<Addrinfo>] in the order to try them
      # @param name [String] "host:port", for error messages
      # @param attempt_delay [Numeric] seconds before the next attempt starts
      def initialize(loop, addresses, name, attempt_delay)
        @loop = loop
        @waiting = addresses.dup
        @name = name
        @delay = attempt_delay
        @attempts = {} # Socket => [its Addrinfo, its Watcher (nil if it connected at once)]
        @answers = Queue.new # sockets whose connect finished, either way
        @error = nil # the last attempt's failure
      end

      # @param deadline [Float, nil] CLOCK_MONOTONIC time to give up at
      # @return [Socket] the first socket to connect
      # @raise [SystemCallError] the last failure, when every attempt failed
      # @raise [Evix::TimeoutError] at the deadline
      def run(deadline)
        start_next
        loop do
          raise @error if @attempts.empty? && @waiting.empty?

          socket = @answers.pop(timeout: pause(deadline))
          return socket if socket && connected?(socket)

          start_next # no answer within the delay, or a failure: the next address starts
        end
      ensure
        @attempts.each do |socket, (_, watcher)|
          watcher&.cancel
          socket.close
        end
      end

      private

      # How long to wait for an answer: until the deadline, or until the
      # next address is due.
      def pause(deadline)
        left = deadline && (deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC))
        raise TimeoutError, "connect to #{@name} timed out" if left && left <= 0

        @waiting.empty? ? left : [@delay, left].compact.min
      end

      # Starts the next address's attempt; one that fails at once (no such
      # family, no route) is recorded and the one after it starts instead.
      def start_next
        while (address = @waiting.shift)
          begin
            socket = Socket.new(address.afamily, :STREAM)
            if socket.connect_nonblock(address, exception: false) == :wait_writable
              @attempts[socket] = [address, @loop.add_io(socket, WRITE | ONESHOT) { @answers << socket }]
            else
              @attempts[socket] = [address, nil]
              @answers << socket
            end
            return
          rescue SystemCallError => e
            socket&.close
            @error = failure(address, e.errno)
          end
        end
      end

      # Takes an answered attempt out of the race: true if it connected (the
      # caller owns it now), else it is closed and its error recorded.
      def connected?(socket)
        address, watcher = @attempts.delete(socket)
        watcher&.cancel
        errno = socket.getsockopt(:SOCKET, :ERROR).int
        return true if errno.zero?

        socket.close
        @error = failure(address, errno)
        false
      end

      # The error names the address when +name+ is a host name.
      def failure(address, errno)
        where = @name.start_with?("#{address.ip_address}:") ? @name : "#{@name} (#{address.inspect_sockaddr})"
        SystemCallError.new(where, errno)
      end
    end
    private_constant :Race
  end
end
