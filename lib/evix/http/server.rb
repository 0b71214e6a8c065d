# frozen_string_literal: true

module Evix
  module HTTP
    # An HTTP/1.1 server for a Rack app, on an Evix::TCPServer (TLS
    # included) or an Evix::UNIXServer: one task per connection, requests
    # answered in order (see Evix::HTTP::Connection), the limits of
    # Evix::HTTP::Limits.
    #
    # The app runs in the connection's task. For what it blocks on (a
    # database, Net::HTTP, sleep) to overlap with other requests, run the
    # server under evix's Fiber scheduler on the same loop:
    #
    #   Evix.run do
    #     server = Evix::HTTP::Server.new(app, loop: Fiber.scheduler.loop, port: 9292)
    #     # ... server.shutdown(timeout: 5) to drain
    #   end
    #
    # Evix::HTTP.run does that, with signals and workers, for `evix serve`.
    class Server
      # @return [#call] the Rack app
      attr_reader :app

      # @return [Evix::HTTP::Limits]
      attr_reader :limits

      # @return [Evix::HTTP::Parser] the head parser the connections share
      # @api private
      attr_reader :parser

      # @return [#write, nil] where the access log goes (Common Log Format)
      attr_reader :access_log

      # @param app [#call] a Rack app
      # @param loop [Evix::Loop]
      # @param host [String, nil, BasicSocket] address to bind (nil: every
      #   address), or a listening TCP socket to serve (Evix::Workers')
      # @param port [Integer, nil] 0 picks a free one; nil with a socket
      # @param path [String, nil] serve a UNIX socket at this path instead
      # @param ssl_context [OpenSSL::SSL::SSLContext, nil] serve HTTPS
      # @param access_log [#write, nil] write a Common Log Format line per request here
      # @param error_log [#write] where app errors and their backtraces go
      # @param multiprocess [Boolean] rack.multiprocess (true under workers)
      # @param limits [Hash] the options of Evix::HTTP::Limits
      # @raise [ArgumentError, TypeError] an unknown option, a bad value, an
      #   app that does not respond to #call
      def initialize(app, loop:, host: "127.0.0.1", port: 9292, path: nil, ssl_context: nil, access_log: nil,
                     error_log: $stderr, multiprocess: false, **limits)
        raise TypeError, "app must respond to #call (got #{app.inspect})" unless app.respond_to?(:call)

        @app = app
        @limits = Limits.new(**limits)
        @parser = Parser.new(@limits.max_request_line, @limits.max_head, @limits.max_headers, @limits.max_body,
                             @limits.max_chunk_line)
        @access_log = access_log
        @error_log = error_log
        @server = listen(loop, host, port, path, ssl_context)
        @server.on_error { |error, _client| report(error, nil) unless client_gone?(error) }
        @base_env = base_env(ssl_context ? "https" : "http", multiprocess)
      end

      # @return [Addrinfo] the bound address
      def local_address
        @server.local_address
      end

      # @return [Integer, nil] the bound port (nil on a UNIX socket)
      def port
        address = local_address
        address.ip? ? address.ip_port : nil
      end

      # @return [Integer] connections open now
      def connections
        @server.connections
      end

      # Stops accepting; open connections go on. Idempotent.
      # @return [nil]
      def close
        @server.close
      end

      # @return [Boolean] whether the server stopped accepting
      def closed?
        @server.closed?
      end

      # Drains (Evix::Server#shutdown): stops accepting, lets requests in
      # progress finish, closes idle kept-alive connections (their reads see
      # end of file), forces what is left at the deadline.
      # @param timeout [Numeric] seconds
      # @return [Integer] connections forced at the deadline
      def shutdown(timeout: 5)
        @server.shutdown(timeout: timeout)
      end

      # The env every request of +client+ starts from (a copy of it).
      # @api private
      # @param client [Evix::IO]
      # @return [Hash]
      def env_template(client)
        address = client.remote_address
        @base_env.merge("REMOTE_ADDR" => address&.ip? ? address.ip_address : "127.0.0.1")
      rescue SystemCallError, ClosedError
        @base_env.dup
      end

      # A hijacking app keeps +client+ (Evix::Server#detach).
      # @api private
      # @param client [Evix::IO]
      # @return [nil]
      def detach(client)
        @server.detach(client)
      end

      # Logs an app's failure: its class, message and backtrace, never to the client.
      # @api private
      # @param error [Exception]
      # @param env [Hash, nil] the request's env
      # @return [nil]
      def report(error, env)
        request = env && " (#{env["REQUEST_METHOD"]} #{env["REQUEST_URI"]})"
        lines = ["evix serve: #{error.class}: #{error.message}#{request}"]
        lines.concat((error.backtrace || []).map { |line| "\t#{line}" })
        @error_log.write("#{lines.join("\n")}\n")
        nil
      rescue StandardError
        nil
      end

      # Whether +error+ says the client went away or stalled (no error of
      # the server's or the app's, not logged).
      # @api private
      # @param error [Exception]
      # @return [Boolean]
      def client_gone?(error)
        error.is_a?(ClosedError) || error.is_a?(TimeoutError) || error.is_a?(EOFError) ||
          error.is_a?(Errno::EPIPE) || error.is_a?(Errno::ECONNRESET) ||
          (defined?(OpenSSL::SSL::SSLError) && error.is_a?(OpenSSL::SSL::SSLError)) || false
      end

      private

      def listen(loop, host, port, path, ssl_context)
        max = @limits.max_connections
        handler = proc { |client| serve(client) }
        if path
          raise ArgumentError, "ssl_context is for TCP (got a path)" if ssl_context

          UNIXServer.new(loop, path, max_connections: max, &handler)
        else
          TCPServer.new(loop, host, port, ssl_context: ssl_context, max_connections: max, &handler)
        end
      end

      def serve(client)
        client.timeout = @limits.io_timeout
        Connection.new(self, client).serve
      end

      def base_env(scheme, multiprocess)
        address = local_address
        {
          "SCRIPT_NAME" => "",
          "SERVER_NAME" => address.ip? ? address.ip_address : "localhost",
          "SERVER_PORT" => (if address.ip?
                              address.ip_port
                            else
                              (scheme == "https" ? 443 : 80)
                            end).to_s,
          "SERVER_SOFTWARE" => "evix/#{Evix::VERSION}",
          "rack.version" => [1, 3],
          "rack.url_scheme" => scheme,
          "rack.errors" => @error_log,
          "rack.multithread" => false,
          "rack.multiprocess" => multiprocess,
          "rack.run_once" => false,
          "rack.hijack?" => true
        }.freeze
      end
    end
  end
end
