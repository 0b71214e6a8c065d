# frozen_string_literal: true

# What every benchmark server shares: its command line, the "ready" line and
# the HTTP hello. A server is run as
#
#   ruby bench/servers/NAME.rb PORT echo|http
#
# listens on 127.0.0.1:PORT, prints "ready" once it accepts connections, and
# serves until killed. `echo` writes back every byte it reads; `http` answers
# each complete HTTP/1.1 request (headers up to the blank line; no bodies) with
# a keep-alive "Hello, World!". Every server reads in READ_SIZE chunks.
module BenchServer
  READ_SIZE = 16 * 1024
  HOST = "127.0.0.1"
  RESPONSE = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!"
  END_OF_REQUEST = "\r\n\r\n"

  module_function

  # @return [Array(Integer, Symbol)] port and mode (:echo or :http) from ARGV
  def options
    port, mode = ARGV
    abort "usage: #{$PROGRAM_NAME} PORT echo|http" unless port&.match?(/\A\d+\z/) && %w[echo http].include?(mode)
    [Integer(port), mode.to_sym]
  end

  def ready!
    $stdout.puts "ready"
    $stdout.flush
  end

  # The reply to +data+ just read from a connection whose earlier unanswered
  # bytes are in +pending+ (an unfrozen String kept per connection): for echo
  # the data itself; for http one response per request completed, "" if none.
  def reply(mode, data, pending)
    return data if mode == :echo

    pending << data
    requests = 0
    while (index = pending.index(END_OF_REQUEST))
      pending.slice!(0, index + END_OF_REQUEST.bytesize)
      requests += 1
    end
    RESPONSE * requests
  end
end
