# frozen_string_literal: true

require "socket"
require_relative "address"

module Evix
  # Outgoing UNIX domain socket connections for tasks.
  module UNIXClient
    # First and longest pause between connects to a server whose backlog is
    # full (a UNIX socket says EAGAIN then, and never "in progress").
    RETRY_PAUSES = [0.001, 0.05].freeze

    module_function

    # Connects to the server listening on +path+ without blocking the loop
    # and returns the connection as an Evix::IO. No server there raises the
    # real errno (Errno::ECONNREFUSED, Errno::ENOENT, with the path in the
    # message); a server whose backlog stays full for +timeout+ seconds
    # raises Evix::TimeoutError.
    # @param loop [Evix::Loop]
    # @param path [String, #to_path] the socket file (at most 108 bytes on Linux)
    # @param timeout [Numeric, nil] seconds to wait at most (finite, not negative)
    # @return [Evix::IO]
    # @raise [ArgumentError] for a bad path or timeout (see UNIXServer.new)
    def connect(loop, path, timeout: nil)
      Arguments.open_loop(loop)
      path = Net::Address.check_path(path)
      timeout &&= Arguments.seconds(timeout, "timeout")
      raise Error, "Evix::UNIXClient.connect must be called inside a task" unless Task.current

      deadline = timeout && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout)
      socket = Socket.new(:UNIX, :STREAM)
      establish(loop, socket, Addrinfo.unix(path), deadline) or
        raise TimeoutError, "connect to #{path} timed out after #{timeout}s"
      Evix::IO.new(loop, socket)
    rescue StandardError, CancelledError
      socket&.close
      raise
    end

    # Tries until the server takes the connection (true) or the deadline
    # passes (false), pausing longer each time it is busy.
    def establish(loop, socket, address, deadline)
      pause = RETRY_PAUSES[0]
      begin
        socket.connect_nonblock(address, exception: false)
        true
      rescue Errno::EAGAIN
        left = deadline && (deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC))
        return false if left && left <= 0

        loop.sleep(left ? [pause, left].min : pause)
        pause = [pause * 2, RETRY_PAUSES[1]].min
        retry
      end
    end

    private_class_method :establish
  end
end
