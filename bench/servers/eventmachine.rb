# frozen_string_literal: true

# EventMachine with its epoll reactor: an EM::Connection per client;
# receive_data/send_data (EM buffers outgoing data itself).

require "eventmachine"
require_relative "../support/bench_server"

port, mode = BenchServer.options

# One client connection.
class Handler < EM::Connection
  def initialize(mode)
    super()
    @mode = mode
    @pending = +""
  end

  def post_init
    set_sock_opt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
  end

  def receive_data(data)
    reply = BenchServer.reply(@mode, data, @pending)
    send_data(reply) unless reply.empty?
  end
end

EM.epoll
EM.run do
  EM.start_server(BenchServer::HOST, port, Handler, mode)
  BenchServer.ready!
end
