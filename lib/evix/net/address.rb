# frozen_string_literal: true

require "socket"

module Evix
  # What servers, clients and Evix::Workers share about sockets: the checks
  # of where they listen or connect (Address) and the making of listeners
  # (Listener). They depend on nothing of the servers or clients.
  # @api private
  module Net
    # Checks of hosts, ports and socket paths, made before any socket is, so
    # that a wrong one raises at the call and leaves nothing behind.
    # @api private
    module Address
      # @param host [Object] where a server listens
      # @return [String, nil] +host+, checked (nil: every address)
      # @raise [TypeError, ArgumentError] not a String or nil, or empty
      def self.check_host(host)
        raise TypeError, "host must be a String or nil (got #{host.inspect})" unless host.nil? || host.is_a?(String)
        raise ArgumentError, "host must not be empty (nil listens on every address)" if host&.empty?

        host
      end

      # @param host [Object] where a client connects
      # @return [String] +host+, checked
      # @raise [TypeError, ArgumentError] not a String, or empty
      def self.check_peer_host(host)
        raise TypeError, "host must be a String (got #{host.inspect})" unless host.is_a?(String)
        raise ArgumentError, "host must not be empty" if host.empty?

        host
      end

      # @param port [Object] a TCP port
      # @return [Integer] +port+, checked
      # @raise [TypeError, ArgumentError] nil, not an Integer, or out of range
      def self.check_port(port)
        raise ArgumentError, "a port is needed (or a listening socket in place of the host)" if port.nil?
        raise TypeError, "port must be an Integer (got #{port.inspect})" unless port.is_a?(Integer)
        raise ArgumentError, "port must be between 0 and 65535 (got #{port})" unless port.between?(0, 65_535)

        port
      end

      # @param path [Object] a UNIX socket's file
      # @return [String] +path+ as a String, checked against sun_path
      # @raise [TypeError, ArgumentError] not a String or #to_path, empty,
      #   with a NUL byte, or too long
      def self.check_path(path)
        path = path.to_path if !path.is_a?(String) && path.respond_to?(:to_path)
        raise TypeError, "path must be a String or respond to #to_path (got #{path.inspect})" unless path.is_a?(String)
        raise ArgumentError, "path must not be empty" if path.empty?
        raise ArgumentError, "path must not contain a NUL byte (got #{path.inspect})" if path.include?("\0")

        begin
          Socket.sockaddr_un(path)
        rescue ArgumentError => e
          raise ArgumentError, "path is too long for a UNIX socket (#{e.message}): #{path}"
        end
        path
      end
    end
  end
end
