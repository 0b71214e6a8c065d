# frozen_string_literal: true

require "socket"

module Evix
  # What Evix::TCPServer and Evix::UNIXServer share: a listener watched by the
  # loop, one task per accepted connection, idle timeouts, on_error, #close and
  # the #shutdown drain. A subclass only says how its listener is made (its
  # private #listen returns the bound, listening socket; #initialize calls
  # it) and may prepare each accepted socket (#connection).
  #
  # The block receives each connection as an Evix::IO; the connection is
  # closed when the block ends.
  class Server
    # Seconds to wait before accepting again after EMFILE/ENFILE.
    ACCEPT_BACKOFF = 0.05
    # Errors that mean the peer went away: on_error gets them, the default
    # handler does not print them.
    PEER_GONE = [Errno::ECONNRESET, Errno::EPIPE].freeze

    # @return [Integer] connections currently open
    attr_reader :connections

    # @return [Addrinfo] the bound address
    attr_reader :local_address

    # Checks the options, then listens (the subclass's #listen) and starts
    # accepting. Nothing is bound when an argument is wrong.
    # @param loop [Evix::Loop]
    # @param idle_timeout [Numeric, nil] close connections with no input for
    #   this many seconds (finite, not negative)
    # @param write_high_water [Integer] each connection's
    #   Evix::IO#write_high_water
    # @param max_connections [Integer, nil] past this many open connections
    #   the server stops accepting until one ends (the kernel's backlog
    #   holds the others); nil: no bound
    # @yieldparam client [Evix::IO] each connection, in its own task; closed
    #   when the block returns
    # @raise [TypeError] for a loop that is not an Evix::Loop
    # @raise [Evix::ClosedError] for a closed loop
    # @raise [ArgumentError] without a block, or for a negative or non-finite
    #   idle_timeout, a write_high_water that is not a positive Integer, or a
    #   max_connections that is not a positive Integer
    def initialize(loop, idle_timeout: nil, write_high_water: IO::WRITE_HIGH_WATER, max_connections: nil, &handler)
      Arguments.open_loop(loop)
      raise ArgumentError, "#{self.class}.new requires a block" unless handler
      unless max_connections.nil? || (max_connections.is_a?(Integer) && max_connections.positive?)
        raise ArgumentError, "max_connections must be a positive Integer or nil (got #{max_connections.inspect})"
      end

      @max_connections = max_connections
      @paused = false
      @detached = {} # connections a handler keeps past its end (#detach)

      @write_high_water = IO.high_water(write_high_water)
      @loop = loop
      @handler = handler
      @idle_timeout = idle_timeout && Arguments.seconds(idle_timeout, "idle_timeout")
      @clients = {} # Evix::IO => its Evix::Task
      @connections = 0
      @on_error = method(:report)
      @listener = listen
      @local_address = @listener.local_address
      @watcher = loop.add_io(@listener, READ) { accept_all }
    rescue StandardError
      abandon_listener if @listener # the loop refused it (another thread's loop): nothing stays bound
      raise
    end

    # Sets the handler for a connection's exception (default: the exception
    # and its first frames on $stderr, evix's own folded: Evix::Backtrace.report;
    # a peer that went away, Errno::ECONNRESET or Errno::EPIPE, is not the
    # server's error and the default leaves it out, as Puma does).
    # @return [self]
    def on_error(&block)
      raise ArgumentError, "on_error requires a block" unless block

      @on_error = block
      self
    end

    # Leaves +client+ open when its handler ends: the handler handed it on
    # (an HTTP hijack). It no longer counts as one of the server's
    # connections, and #shutdown no longer waits for it or closes it.
    # @param client [Evix::IO] a connection of this server, from its handler
    # @return [nil]
    def detach(client)
      @detached[client] = true if @clients.key?(client)
      nil
    end

    # Stops accepting; open connections go on. Idempotent.
    # @return [nil]
    def close
      return if @listener.closed?

      @watcher.cancel
      @backoff&.cancel
      @listener.close
      nil
    end

    # @return [Boolean] whether the server stopped accepting
    def closed?
      @listener.closed?
    end

    # Drains: answers what arrived before it began, stops accepting, and
    # force-closes what is left at the deadline. What arrived: every
    # connection accepted or waiting in the listen backlog (accepted now),
    # and the input the kernel holds for each. Their reads get that input,
    # then end of file (Evix::IO#close_read), so a request that had arrived
    # is answered and an idle connection ends at once; writes go on. At the
    # deadline the handlers left are cancelled (Evix::CancelledError at
    # their wait, ensure blocks run). Returns when the drain is over. Inside a task (and a block
    # of Loop#add_signal runs in one) the calling fiber waits while the loop
    # goes on; outside Loop#run, the loop runs. A plain callback (add_timer,
    # add_io) cannot wait: spawn a task there.
    # @param timeout [Numeric] seconds before what is left is forced
    #   (finite, not negative)
    # @return [Integer] how many connections had to be forced
    # @raise [ArgumentError] for a negative or non-finite timeout
    def shutdown(timeout: 5)
      timeout = Arguments.seconds(timeout, "timeout")
      accept_all unless closed?
      close
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      @clients.each_key(&:close_read)
      until @clients.empty?
        remaining = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        break if remaining <= 0

        wait_for_clients(remaining)
      end
      force(@clients.dup)
    end

    private

    # Closes a listener #initialize could not start serving.
    def abandon_listener
      @listener.close unless @listener.closed?
    end

    # The one step between accept and the handler: turns an accepted socket
    # into the connection the handler gets. Runs in the accept callback (it
    # cannot wait); a subclass sets socket options here, or wraps the socket
    # (TLS) before calling super.
    def connection(socket)
      Evix::IO.new(@loop, socket, write_high_water: @write_high_water)
    end

    def accept_all
      loop do
        socket, = @listener.accept_nonblock(exception: false)
        return if socket == :wait_readable || socket.nil?

        start(socket)
        return if @paused
      end
    rescue Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM => e
      back_off(e)
    rescue Errno::ECONNABORTED, Errno::EPROTO
      retry
    rescue ::IOError
      nil # closed by #close from a callback of this iteration
    end

    # Out of descriptors: stop watching the listener (level-triggered, it
    # would spin) and try again a little later.
    def back_off(error)
      @watcher.cancel
      warn "evix: accept failed (#{error.message}); retrying in #{ACCEPT_BACKOFF}s" unless @warned
      @warned = true
      @backoff = @loop.add_timer(ACCEPT_BACKOFF) do
        @backoff = nil
        next if @listener.closed?

        @watcher = @loop.add_io(@listener, READ) { accept_all }
        accept_all
      end
    end

    def start(socket)
      client = begin
        connection(socket)
      rescue StandardError
        socket.close
        raise
      end
      @clients[client] = @loop.spawn { serve(client) }
      @connections += 1
      pause_accepting if @max_connections && @connections >= @max_connections
    end

    # At max_connections: the listener is not watched until one ends.
    def pause_accepting
      @paused = true
      @watcher.cancel
    end

    def resume_accepting
      @paused = false
      return if @listener.closed? || @backoff

      @watcher = @loop.add_io(@listener, READ) { accept_all }
    end

    def serve(client)
      idle = watch_idle(client)
      @handler.call(client)
    rescue CancelledError
      raise # #shutdown's deadline (or the user) cancelled the handler: not its error
    rescue ClosedError, Errno::EPIPE, Errno::ECONNRESET => e
      @on_error.call(e, client) unless client.closed? || e.is_a?(ClosedError)
    rescue StandardError => e
      @on_error.call(e, client)
    ensure
      idle&.cancel
      client.close unless @detached.delete(client)
      @clients.delete(client)
      @connections -= 1
      resume_accepting if @paused && @connections < @max_connections
    end

    def watch_idle(client)
      return unless @idle_timeout

      client.idle_timer = @loop.add_timer(@idle_timeout) { client.close }
    end

    # Closes the connections left at the deadline and cancels their
    # handlers, then gives the loop one turn so that those end (their ensure
    # blocks run) before #shutdown returns.
    # @param left [Hash{Evix::IO => Evix::Task}] the connections still open
    # @return [Integer] how many
    def force(left)
      left.each do |client, task|
        client.close
        task.cancel("#{self.class}#shutdown: deadline passed")
      end
      wait_for_clients(0) unless left.empty?
      left.size
    end

    # Polls: connections end in their own fibers, at their own pace.
    def wait_for_clients(remaining)
      pause = [remaining, 0.01].min
      Task.current ? @loop.sleep(pause) : @loop.run_once(pause)
    end

    def report(error, _client)
      return if PEER_GONE.any? { |gone| error.is_a?(gone) }

      warn "evix: connection error: #{Backtrace.report(error)}"
    end
  end
end
