# frozen_string_literal: true

module Evix
  module HTTP
    # The access log's lines, in the Common Log Format:
    #   127.0.0.1 - - [03/Dec/2026:11:30:00 +0000] "GET /a?b HTTP/1.1" 200 5
    module AccessLog
      module_function

      # @param env [Hash] the request's env
      # @param status [Integer, #to_i]
      # @param bytes [Integer, nil] body bytes sent (nil: not known, "-")
      # @param started [Float] when the request started (Unix time)
      # @return [String] one line, "\n" included
      def line(env, status, bytes, started)
        time = Time.at(started).utc.strftime("%d/%b/%Y:%H:%M:%S +0000")
        request = "#{env["REQUEST_METHOD"]} #{env["REQUEST_URI"]} #{env["SERVER_PROTOCOL"]}"
        "#{env["REMOTE_ADDR"] || "-"} - - [#{time}] \"#{request.dump[1..-2]}\" #{status.to_i} #{bytes || "-"}\n"
      end
    end
  end
end
