# frozen_string_literal: true

module Evix
  module HTTP
    # What the server writes besides the app's bytes: status lines, the
    # Date field (made once a second), the answers to refused requests.
    module Response
      # Reason phrases (RFC 9110 §15); an unknown status gets none.
      REASONS = {
        100 => "Continue", 101 => "Switching Protocols", 102 => "Processing", 103 => "Early Hints",
        200 => "OK", 201 => "Created", 202 => "Accepted", 203 => "Non-Authoritative Information",
        204 => "No Content", 205 => "Reset Content", 206 => "Partial Content", 207 => "Multi-Status",
        208 => "Already Reported", 226 => "IM Used",
        300 => "Multiple Choices", 301 => "Moved Permanently", 302 => "Found", 303 => "See Other",
        304 => "Not Modified", 305 => "Use Proxy", 307 => "Temporary Redirect", 308 => "Permanent Redirect",
        400 => "Bad Request", 401 => "Unauthorized", 402 => "Payment Required", 403 => "Forbidden",
        404 => "Not Found", 405 => "Method Not Allowed", 406 => "Not Acceptable",
        407 => "Proxy Authentication Required", 408 => "Request Timeout", 409 => "Conflict", 410 => "Gone",
        411 => "Length Required", 412 => "Precondition Failed", 413 => "Content Too Large",
        414 => "URI Too Long", 415 => "Unsupported Media Type", 416 => "Range Not Satisfiable",
        417 => "Expectation Failed", 421 => "Misdirected Request", 422 => "Unprocessable Content",
        423 => "Locked", 424 => "Failed Dependency", 425 => "Too Early", 426 => "Upgrade Required",
        428 => "Precondition Required", 429 => "Too Many Requests", 431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error", 501 => "Not Implemented", 502 => "Bad Gateway",
        503 => "Service Unavailable", 504 => "Gateway Timeout", 505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates", 507 => "Insufficient Storage", 508 => "Loop Detected",
        511 => "Network Authentication Required"
      }.freeze

      # "HTTP/1.1 200 OK\r\n" for each status with a reason, made once.
      STATUS_LINES = REASONS.to_h { |status, reason| [status, "HTTP/1.1 #{status} #{reason}\r\n".b.freeze] }.freeze

      # Statuses whose responses have no body (RFC 9110 §6.4.1).
      NO_BODY = ->(status) { status < 200 || status == 204 || status == 304 }

      # Response header fields the server reads or writes itself, as Rack 3
      # (lower case) and Rack 2 apps (any case) name them.
      FIELDS = {
        "content-length" => :length, "transfer-encoding" => :encoding, "connection" => :connection,
        "date" => :date, "rack.hijack" => :hijack
      }.freeze

      # FIELDS by the names apps use, learnt as they come: one Hash look-up
      # per field of a response; :plain for a field passed on as it is.
      # Bounded: past KINDS_KEPT names, a name is looked up each time.
      KINDS = Hash.new do |kinds, name|
        kind = FIELDS[name.downcase] || :plain
        kinds.size < KINDS_KEPT ? kinds[name] = kind : kind
      end
      # The most names KINDS keeps.
      KINDS_KEPT = 256

      module_function

      # @param status [Integer] 100 to 999
      # @return [String] the status line, CRLF included
      def status_line(status)
        STATUS_LINES[status] || "HTTP/1.1 #{status} \r\n"
      end

      # What the app's header field +name+ is to the server: :length,
      # :encoding, :connection, :date, :hijack, or nil (passed on as it is).
      # @param name [String]
      # @return [Symbol, nil]
      def field(name)
        kind = KINDS[name]
        kind == :plain ? nil : kind
      end

      # The Date field's line for now, made once a second.
      # @return [String] "date: ...\r\n"
      def date_line
        now = Process.clock_gettime(Process::CLOCK_REALTIME, :second)
        return @date_line if now == @date_second

        @date_second = now
        @date_line = "date: #{Time.at(now).utc.strftime("%a, %d %b %Y %H:%M:%S GMT")}\r\n".b.freeze
      end

      # One field, a line per value: an Array's elements or a String's lines
      # (Rack 2's multi-value fields); a value with a CR in it is dropped
      # (response splitting).
      # @param head [String] the response head so far
      # @param name [String]
      # @param value [String, Array<String>, #to_s]
      # @return [void]
      def append_field(head, name, value)
        if value.is_a?(String) && !value.include?("\n")
          head << name << ": " << value << "\r\n" unless value.include?("\r")
          return
        end

        values = value.is_a?(Array) ? value : value.to_s.split("\n")
        values.each do |line|
          line = line.to_s
          head << name << ": " << line << "\r\n" unless line.include?("\r") || line.include?("\n")
        end
      end

      # The whole response to a request refused before the app saw it:
      # +status+, the reason as a one-line body, and a close.
      # @param status [Integer]
      # @param reason [String]
      # @return [String]
      def refusal(status, reason)
        body = "#{reason}\n"
        "#{status_line(status)}content-type: text/plain\r\ncontent-length: #{body.bytesize}\r\n" \
        "connection: close\r\n#{date_line}\r\n#{body}".b
      end
    end
  end
end
