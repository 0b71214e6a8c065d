# frozen_string_literal: true

require "json"
require "socket"
require_relative "server_process"

# Runs spec/support/http_apps.rb in a process of its own and talks to it
# as clients do: raw sockets (for the shapes no client library sends), curl,
# Net::HTTP.
module HTTPHelpers
  APPS = File.expand_path("http_apps.rb", __dir__)

  # Yields a started server (a ServerProcess); stops it after, whatever happens.
  def with_http_server(**config, &)
    ServerProcess.run("evix serve", [APPS, JSON.generate(config)], ready: /listening on .*:(\d+)\z/, &)
  end

  # A raw connection to the server.
  def raw(server)
    socket = Socket.tcp("127.0.0.1", server.port, connect_timeout: 5)
    (@raw_sockets ||= []) << socket
    socket
  end

  # Reads one response from +socket+: [status, headers (lower-case names),
  # body] for a Content-Length or chunked body, or until end of file.
  def read_response(socket, head: false, timeout: 5)
    status_line = read_line(socket, timeout)
    return nil unless status_line

    status = Integer(status_line[%r{\AHTTP/1\.[01] (\d{3})}, 1] || raise("bad status line #{status_line.inspect}"))
    headers = {}
    while (line = read_line(socket, timeout)) && !line.empty?
      name, value = line.split(":", 2)
      (headers[name.downcase] ||= []) << value.strip
    end
    [status, headers.transform_values do |v|
               v.size == 1 ? v.first : v
             end, read_body(socket, status, headers, head, timeout)]
  end

  # Reads until end of file (or +timeout+); what came.
  def read_to_eof(socket, timeout: 5)
    data = +""
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
      raise "no end of file within #{timeout}s (got #{data.inspect})" unless left.positive?
      next unless socket.wait_readable(left)

      chunk = socket.read_nonblock(65_536, exception: false)
      break if chunk.nil?
      next if chunk == :wait_readable

      data << chunk
    end
    data
  rescue Errno::ECONNRESET
    data
  end

  # Runs curl with +args+; [stdout, status].
  def curl(*args)
    out = IO.popen(["curl", "-sS", "--max-time", "10", *args], err: %i[child out], &:read)
    [out, $CHILD_STATUS]
  end

  private

  def read_body(socket, status, headers, head, timeout)
    return "" if head || status < 200 || [204, 304].include?(status)
    return read_exactly(socket, Integer(headers["content-length"].first), timeout) if headers["content-length"]
    return read_to_eof(socket, timeout: timeout) unless headers["transfer-encoding"]

    body = +""
    while (size = Integer(read_line(socket, timeout), 16)).positive?
      body << read_exactly(socket, size, timeout)
      read_line(socket, timeout)
    end
    read_line(socket, timeout)
    body
  end

  def read_line(socket, timeout)
    line = +""
    until line.end_with?("\r\n")
      raise "no line within #{timeout}s (got #{line.inspect})" unless socket.wait_readable(timeout)

      byte = socket.read(1)
      return(line.empty? ? nil : line) unless byte

      line << byte
    end
    line.chomp("\r\n")
  end

  def read_exactly(socket, length, timeout)
    data = +""
    while data.bytesize < length
      raise "body incomplete after #{timeout}s" unless socket.wait_readable(timeout)

      chunk = socket.read(length - data.bytesize) or raise("end of file in a body")
      data << chunk
    end
    data
  end
end

RSpec.configure do |config|
  config.include HTTPHelpers, :http
  config.after(:each, :http) { @raw_sockets&.each { |socket| socket.close unless socket.closed? } }
end
