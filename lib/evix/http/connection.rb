# frozen_string_literal: true

module Evix
  module HTTP
    # One client connection of an Evix::HTTP::Server, in its own task: reads
    # a request head (parsed in Rust straight into the Rack env), runs the
    # app, writes the response, and again while the connection is kept
    # alive. Pipelined requests wait in the connection's buffer and are
    # answered in order.
    #
    # It is the env's "rack.hijack" too: calling it hands the connection to
    # the app (see #call).
    # @api private
    class Connection
      # Env keys and values the response depends on.
      REQUEST_METHOD = "REQUEST_METHOD"
      # (see REQUEST_METHOD)
      SERVER_PROTOCOL = "SERVER_PROTOCOL"
      # (see REQUEST_METHOD)
      HTTP10 = "HTTP/1.0"
      # (see REQUEST_METHOD)
      HEAD = "HEAD"
      # Pieces of a response head and of a chunked body.
      CRLF = "\r\n"
      # (see CRLF)
      LAST_CHUNK = "0\r\n\r\n"
      # (see CRLF)
      CLOSE = "connection: close\r\n"
      # (see CRLF)
      KEEP_ALIVE = "connection: keep-alive\r\n"
      # (see CRLF)
      CHUNKED = "transfer-encoding: chunked\r\n"
      # What no field value may hold (response splitting).
      LINE_BREAK = /[\r\n]/
      # Bodies up to this size go out in the same write as the head.
      ONE_WRITE = 64 * 1024
      # Unread request body the server reads past to keep a connection.
      SKIP_LIMIT = 64 * 1024
      # Bytes read and dropped after a refusal, before closing, so that the
      # client gets the answer instead of a reset.
      LINGER_BYTES = 256 * 1024
      # Seconds the same may take.
      LINGER_SECONDS = 1
      private_constant :REQUEST_METHOD, :SERVER_PROTOCOL, :HTTP10, :HEAD, :CRLF, :LAST_CHUNK, :CLOSE, :KEEP_ALIVE,
                       :CHUNKED, :LINE_BREAK, :ONE_WRITE, :SKIP_LIMIT, :LINGER_BYTES, :LINGER_SECONDS

      # @param server [Evix::HTTP::Server] what the connections share
      # @param client [Evix::IO] the connection
      def initialize(server, client)
        @server = server
        @client = client
        @app = server.app
        @parser = server.parser
        @limits = server.limits
        @template = server.env_template(client)
        @hijacked = false
      end

      # Serves requests until the connection closes or is not kept alive.
      # @return [nil]
      def serve
        timeout = @limits.header_timeout
        while (env = next_request(timeout))
          break unless respond(env)

          timeout = @limits.keep_alive_timeout
        end
        nil
      end

      # "rack.hijack": the connection is the app's from now on (the server
      # writes no response and does not close it). The app gets the socket
      # itself, as Rack 3 wants (an ::IO; under TLS, the OpenSSL::SSL::SSLSocket);
      # under evix's Fiber scheduler its waits are the loop's. Input the
      # server had read past the request head (a pipelined request) is not
      # handed over.
      # @return [::IO, OpenSSL::SSL::SSLSocket]
      def call
        @hijacked = true
        @server.detach(@client)
        socket = @client.respond_to?(:ssl_socket) ? @client.ssl_socket : @client.io
        @env["rack.hijack_io"] = socket # Rack 2 looks for it there
      end

      private

      # The next request's env; nil when the connection ends instead (end of
      # file, idle past the timeout, or a refused request, answered).
      def next_request(timeout)
        env = nil # made when the first bytes come: an idle connection holds none
        parser = @parser
        used = @client.parse_buffered(timeout) do |buffer, offset|
          parser.parse(buffer, offset, env ||= @template.dup)
        end
        return unless used
        return refuse(-used, parser.reason) if used.negative?

        env
      rescue TimeoutError
        refuse(408, "request head not received in time") if env # some of it came
        nil
      end

      # Runs the app on +env+ and writes its response; whether the
      # connection may serve another request.
      def respond(env)
        keep_alive = @parser.keep_alive?
        input = env["rack.input"] = request_body
        env["rack.hijack"] = self
        @env = env
        started = Process.clock_gettime(Process::CLOCK_REALTIME) if @server.access_log
        status, headers, body = call_app(env)
        return false if @hijacked

        keep_alive = write_response(env, status, headers, body, keep_alive)
        log(env, status, started) if started
        keep_alive && !@hijacked && finish_body(input)
      rescue RequestError => e # a chunked body the decoder refused, read by the app
        refuse(e.status, e.message) unless @written
        false
      rescue StandardError => e
        raise if @server.client_gone?(e)

        fail_response(e, env)
      ensure
        @written = @env = nil
        close_body(body)
        input&.close
      end

      def request_body
        parser = @parser
        if parser.chunked?
          Input.new(@client, nil, ChunkedDecoder.new(parser), continue: parser.expect_continue?,
                                                              memory: @limits.input_memory)
        elsif (length = parser.content_length).positive?
          Input.new(@client, length, nil, continue: parser.expect_continue?, memory: @limits.input_memory)
        else
          Input::EMPTY
        end
      end

      # The app's response; a failure is logged and answered with a 500.
      def call_app(env)
        @app.call(env)
      rescue RequestError
        raise
      rescue StandardError, ScriptError => e
        @server.report(e, env)
        @client.close if @hijacked # nobody else will
        [500, { "content-type" => "text/plain" }, ["Internal Server Error\n"]]
      end

      # The response (its body's #each, most likely) failed: a 500 if nothing
      # was written yet; the connection closes either way.
      def fail_response(error, env)
        @server.report(error, env)
        return false if @written

        @client.write(Response.refusal(500, "Internal Server Error"))
        false
      end

      # Writes the response; returns whether the connection may go on
      # (keep-alive asked, and the response was framed by a length or chunks).
      # rubocop:disable Metrics -- one pass over the fields, one write: split, it would walk them twice
      def write_response(env, status, headers, body, keep_alive)
        status = Integer(status)
        head = Response.status_line(status).dup
        length = hijack = framed = nil
        dated = false
        kinds = Response::KINDS
        headers.each do |name, value|
          case kinds[name]
          when :plain
            # The usual field: one String value, no line break in it.
            next head << "#{name}: #{value}\r\n" if value.is_a?(String) && !LINE_BREAK.match?(value)
          when :length then length = value.to_s
          when :encoding then framed = true # the app framed the body itself: only a close can end it
          when :date then dated = true
          when :connection
            keep_alive = false if value.to_s.downcase.include?("close")
            next # the server writes its own
          when :hijack
            hijack = value
            next
          end
          Response.append_field(head, name, value)
        end
        head << Response.date_line unless dated
        bodiless = status < 200 || status == 204 || status == 304 # RFC 9110 §6.4.1
        head_only = bodiless || env[REQUEST_METHOD] == HEAD
        http10 = env[SERVER_PROTOCOL] == HTTP10
        # An Array, the usual body, is neither a stream nor anything but its parts.
        array = body.instance_of?(Array)
        if hijack || (!array && !bodiless && !body.respond_to?(:each) && body.respond_to?(:call))
          return stream(head, hijack || body, length)
        end

        parts = array ? body : (body.to_ary if body.respond_to?(:to_ary)) unless bodiless
        if length.nil? && parts && !framed
          length = parts.size == 1 ? parts[0].bytesize : parts.sum(&:bytesize)
          head << "content-length: #{length}\r\n"
        end
        chunked = false
        keep_alive = false if framed
        if length.nil? && !head_only && !framed
          if http10
            keep_alive = false
          else
            chunked = true
            head << CHUNKED
          end
        end
        head << (if keep_alive
                   http10 ? KEEP_ALIVE : ""
                 else
                   CLOSE
                 end) << CRLF
        @body_bytes = if head_only
                        @written = true
                        @client.write(head)
                        0
                      elsif parts
                        @written = true
                        write_parts(head, parts)
                      else
                        write_each(head, body, chunked)
                      end
        keep_alive
      end
      # rubocop:enable Metrics

      def write_parts(head, parts)
        bytes = parts.size == 1 ? parts[0].bytesize : parts.sum(&:bytesize)
        if bytes <= ONE_WRITE
          parts.each { |part| head << part }
          @client.write(head)
        else
          @client.write(head)
          parts.each { |part| @client.write(part) }
        end
        bytes
      end

      def write_each(head, body, chunked)
        pending = head # the head goes out with the first part
        bytes = 0
        body.each do |part|
          next if part.empty?

          out = pending || String.new(capacity: part.bytesize + 16)
          pending = nil
          out << part.bytesize.to_s(16) << CRLF if chunked
          out << part
          out << CRLF if chunked
          @written = true
          @client.write(out)
          bytes += part.bytesize
        end
        if pending
          @written = true
          @client.write(chunked ? pending << LAST_CHUNK : pending)
        elsif chunked
          @client.write(LAST_CHUNK)
        end
        bytes
      end

      # A streaming body (+body.call(stream)+) or a response hijack: the
      # head goes out, then the app writes what it likes; the connection
      # ends with the app's call, so it frames nothing.
      def stream(head, callable, length)
        head << CLOSE if length.nil?
        head << CRLF
        @written = true
        @client.write(head)
        callable.call(call)
        @body_bytes = nil
        false
      end

      # After the response: the rest of the request body is read past (or
      # the connection closed when there is too much of it).
      def finish_body(input)
        input.equal?(Input::EMPTY) || input.skip_rest(SKIP_LIMIT)
      rescue RequestError, EOFError, TimeoutError
        false
      end

      def close_body(body)
        body.close if body.respond_to?(:close)
      rescue StandardError => e
        @server.report(e, nil)
      end

      # Answers a refused request, then closes (after reading past what the
      # client still sends, so that it sees the answer rather than a reset).
      def refuse(status, reason)
        @client.write(Response.refusal(status, reason), timeout: LINGER_SECONDS)
        linger
        nil
      rescue ClosedError, TimeoutError, SystemCallError
        nil
      end

      def linger
        socket = @client.io
        return unless socket.is_a?(::BasicSocket) && !@client.respond_to?(:ssl_socket)

        socket.shutdown(::Socket::SHUT_WR)
        read = 0
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + LINGER_SECONDS
        while read < LINGER_BYTES
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          break unless left.positive? && (data = @client.read(Evix::IO::CHUNK, timeout: left))

          read += data.bytesize
        end
      rescue TimeoutError
        nil
      end

      def log(env, status, started)
        @server.access_log.write(AccessLog.line(env, status, @body_bytes, started))
      end
    end
  end
end
