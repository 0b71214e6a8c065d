# frozen_string_literal: true

# async-http's HTTP/1.1 server with protocol-rack's adapter around a Rack app:
# the stack Falcon is built on, without Falcon's process container.
#
#   ruby bench/servers/async_http_rack.rb CONFIG_RU PORT
#
# Prints "ready" once it accepts connections.

require "async"
require "async/http/endpoint"
require "async/http/server"
require "protocol/rack"
require "rack/builder"

path, port = ARGV
abort "usage: #{$PROGRAM_NAME} CONFIG_RU PORT" unless path && port&.match?(/\A\d+\z/)

app = Rack::Builder.parse_file(path)
app = app.first if app.is_a?(Array) # Rack 2 returns [app, options]
endpoint = Async::HTTP::Endpoint.parse("http://127.0.0.1:#{port}")

Sync do |task|
  server = Async::HTTP::Server.new(Protocol::Rack::Adapter.new(app), endpoint)
  listening = task.async { server.run }
  $stdout.puts "ready"
  $stdout.flush
  listening.wait
end
