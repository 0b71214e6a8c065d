# frozen_string_literal: true

require "socket"
require_relative "server"
require_relative "address"
require_relative "listener"

module Evix
  # A UNIX domain socket server: the lifecycle of Evix::TCPServer (see
  # Evix::Server: one task per connection, on_error, idle timeouts, #close,
  # #shutdown) on a socket file.
  #
  # A socket file already at +path+ is removed only when nothing listens on
  # it (a connect is refused: a server that died left it behind); a live
  # listener there raises Errno::EADDRINUSE (it sees that check as a
  # connection that closes at once), and a file that is not a socket is
  # never removed. The server removes its own socket file when it closes
  # (#close, #shutdown), unless the file was replaced meanwhile or the
  # process is a fork of the one that bound it.
  class UNIXServer < Server
    # @return [String] the socket file's path, as given
    attr_reader :path

    # @param loop [Evix::Loop]
    # @param path [String, #to_path] where the socket file goes (at most
    #   108 bytes on Linux: sun_path)
    # @param backlog [Integer] listen(2) backlog
    # @param idle_timeout [Numeric, nil] close connections with no input for
    #   this many seconds (finite, not negative)
    # @param write_high_water [Integer] each connection's Evix::IO#write_high_water
    # @param max_connections [Integer, nil] see Evix::Server#initialize
    # @yieldparam client [Evix::IO] each connection, in its own task; closed
    #   when the block returns
    # @raise [TypeError] for a path that is not a String or #to_path
    # @raise [ArgumentError] for an empty path, one with a NUL byte or too
    #   long for sun_path, a negative or non-finite idle_timeout, or no block
    # @raise [Errno::EADDRINUSE] when a server listens on +path+, or a file
    #   that is not a socket is there
    def initialize(loop, path, backlog: 1024, idle_timeout: nil, write_high_water: IO::WRITE_HIGH_WATER,
                   max_connections: nil, &handler)
      @path = Net::Address.check_path(path)
      @backlog = Net::Listener.check_backlog(backlog)
      super(loop, idle_timeout: idle_timeout, write_high_water: write_high_water, max_connections: max_connections,
                  &handler)
    end

    # Stops accepting and removes the socket file; open connections go on.
    # Idempotent.
    # @return [nil]
    def close
      return if closed?

      super
      remove_socket_file
      nil
    end

    private

    def abandon_listener
      super
      remove_socket_file
    end

    def listen
      remove_stale_socket_file
      socket = Socket.new(:UNIX, :STREAM)
      socket.bind(Addrinfo.unix(@path))
      # Who bound which file: #close removes that file only (see
      # remove_socket_file), looked up by absolute path in case of a chdir.
      @owner = [Process.pid, File.expand_path(@path), File.lstat(@path).ino]
      socket.listen(@backlog)
      socket
    rescue StandardError
      if socket && !socket.closed?
        socket.close
        remove_socket_file
      end
      raise
    end

    # A socket file at @path that nobody listens on is left by a server that
    # died: remove it. A live one, or anything else, stays.
    def remove_stale_socket_file
      return unless File.exist?(@path) || File.symlink?(@path)
      raise Errno::EADDRINUSE, "#{@path} exists and is not a socket" unless File.socket?(@path)
      raise Errno::EADDRINUSE, "#{@path} (a server is listening on it)" if listening?

      File.unlink(@path)
    rescue Errno::ENOENT
      nil # gone meanwhile
    end

    # Whether a server accepts connections on @path. A full backlog
    # (EAGAIN) is a live server too.
    def listening?
      probe = Socket.new(:UNIX, :STREAM)
      probe.connect_nonblock(Addrinfo.unix(@path), exception: false)
      true
    rescue Errno::EAGAIN
      true
    rescue Errno::ECONNREFUSED
      false
    ensure
      probe&.close
    end

    def remove_socket_file
      pid, path, ino = @owner
      return unless pid == Process.pid && File.socket?(path) && File.lstat(path).ino == ino

      File.unlink(path)
    rescue Errno::ENOENT
      nil
    end
  end
end
