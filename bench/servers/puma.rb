# frozen_string_literal: true

# puma with a minimal Rack app, as a user writing an HTTP service would run
# it: Puma::Server with its defaults (one process, puma's thread pool, its
# own reactor for keep-alive connections). Unlike the other servers it parses
# each request fully (method, path, headers into a Rack env). HTTP only.

require "puma"
require "puma/server"
require_relative "../support/bench_server"

port, mode = BenchServer.options
abort "puma serves http only" unless mode == :http

BODY = ["Hello, World!"].freeze
HEADERS = { "content-type" => "text/plain", "content-length" => "13" }.freeze
app = ->(_env) { [200, HEADERS, BODY] }

server = Puma::Server.new(app, nil, log_writer: Puma::LogWriter.null)
server.add_tcp_listener(BenchServer::HOST, port)
BenchServer.ready!
server.run.join
