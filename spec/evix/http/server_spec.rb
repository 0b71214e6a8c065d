# frozen_string_literal: true

require "spec_helper"
require "net/http"
require "English"
require "time"

# Evix::HTTP::Server from outside, in a process of its own
# (spec/support/http_apps.rb, every app under Rack::Lint when Rack is
# installed): real clients on loopback.
RSpec.describe Evix::HTTP::Server, :http do
  let(:get_hello) { "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n" }

  describe "requests and responses" do
    around do |example|
      with_http_server do |server|
        @server = server || raise
        example.run
      end
    end

    attr_reader :server

    it "answers a GET with the body, Content-Length and Date" do
      response = Net::HTTP.get_response(URI("http://127.0.0.1:#{server.port}/hello"))
      expect([response.code, response.body, response["content-length"]]).to eq(%w[200 hello 5])
      expect(Time.httpdate(response["date"])).to be_within(60).of(Time.now)
    end

    it "builds the env the Rack SPEC asks for" do
      env = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/env?a=1&b")))
      expect(env).to include("REQUEST_METHOD" => "GET", "SCRIPT_NAME" => "", "PATH_INFO" => "/env",
                             "QUERY_STRING" => "a=1&b", "SERVER_NAME" => "127.0.0.1",
                             "SERVER_PORT" => server.port.to_s, "SERVER_PROTOCOL" => "HTTP/1.1",
                             "REMOTE_ADDR" => "127.0.0.1", "HTTP_HOST" => "127.0.0.1:#{server.port}",
                             "rack.url_scheme" => "http", "CONTENT_LENGTH" => nil)
    end

    it "joins repeated fields (Cookie with ';'), passes Content-Type without prefix" do
      socket = raw(server)
      socket.write("POST /env HTTP/1.1\r\nHost: x\r\nX-Twice: a\r\nX-Twice: b\r\nCookie: c=1\r\nCookie: d=2\r\n" \
                   "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi")
      env = JSON.parse(read_response(socket)[2])
      expect(env).to include("HTTP_X_TWICE" => "a, b", "HTTP_COOKIE" => "c=1; d=2", "CONTENT_TYPE" => "text/plain",
                             "CONTENT_LENGTH" => "2")
    end

    it "keeps a Net::HTTP connection alive across requests" do
      Net::HTTP.start("127.0.0.1", server.port) do |http|
        3.times { expect(http.get("/hello").body).to eq("hello") }
      end
      socket = raw(server)
      2.times do
        socket.write(get_hello)
        expect(read_response(socket)[0]).to eq(200)
      end
    end

    it "answers pipelined requests in order" do
      socket = raw(server)
      socket.write("GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /each HTTP/1.1\r\nHost: x\r\n\r\n" \
                   "HEAD /head HTTP/1.1\r\nHost: x\r\n\r\nGET /env?p HTTP/1.1\r\nHost: x\r\n\r\n")
      expect(read_response(socket)[2]).to eq("hello")
      expect(read_response(socket)[2]).to eq("onetwothree")
      status, headers, = read_response(socket, head: true)
      expect([status, headers["content-length"]]).to eq([200, "4"])
      expect(JSON.parse(read_response(socket)[2])["QUERY_STRING"]).to eq("p")
    end

    it "closes after Connection: close, and after an HTTP/1.0 request without keep-alive" do
      socket = raw(server)
      socket.write("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      expect(read_to_eof(socket)).to match(%r{\AHTTP/1.1 200 OK\r\n.*connection: close\r\n\r\nhello\z}m)
      socket = raw(server)
      socket.write("GET /hello HTTP/1.0\r\n\r\n")
      expect(read_to_eof(socket)).to end_with("\r\n\r\nhello")
    end

    it "keeps an HTTP/1.0 connection with Connection: keep-alive" do
      socket = raw(server)
      2.times do
        socket.write("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        _, headers, body = read_response(socket)
        expect([headers["connection"], body]).to eq(%w[keep-alive hello])
      end
    end

    it "closes when the app says Connection: close" do
      socket = raw(server)
      socket.write("GET /close HTTP/1.1\r\nHost: x\r\n\r\n")
      expect(read_to_eof(socket)).to end_with("connection: close\r\n\r\n\r\nbye").or end_with("\r\n\r\nbye")
    end

    it "sends no body for HEAD, 204, and keeps the Content-Length of HEAD" do
      socket = raw(server)
      socket.write("HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n#{get_hello}")
      status, headers, = read_response(socket, head: true)
      expect([status, headers["content-length"]]).to eq([200, "5"])
      status, headers, = read_response(socket)
      expect([status, headers.key?("content-length"), headers.key?("transfer-encoding")]).to eq([204, false, false])
      expect(read_response(socket)[2]).to eq("hello")
    end

    it "chunks a body of unknown length for HTTP/1.1, and closes to end it for HTTP/1.0" do
      socket = raw(server)
      socket.write("GET /each HTTP/1.1\r\nHost: x\r\n\r\n")
      _, headers, body = read_response(socket)
      expect([headers["transfer-encoding"], body]).to eq(%w[chunked onetwothree])
      socket = raw(server)
      socket.write("GET /each HTTP/1.0\r\n\r\n")
      expect(read_to_eof(socket)).to end_with("\r\n\r\nonetwothree")
    end

    it "keeps the app's own Content-Length and adds no second one" do
      socket = raw(server)
      socket.write("GET /length HTTP/1.1\r\nHost: x\r\n\r\n#{get_hello}")
      _, headers, body = read_response(socket)
      expect([headers["content-length"], body]).to eq(%w[2 ok])
      expect(read_response(socket)[2]).to eq("hello")
    end

    it "writes each value of a multi-value field on its own line" do
      socket = raw(server)
      socket.write("GET /multi HTTP/1.1\r\nHost: x\r\n\r\n")
      expect(read_response(socket)[1]["set-cookie"]).to eq(%w[a=1 b=2])
    end

    it "streams the request body to rack.input: Content-Length, chunked (curl -T -), Tempfile past memory" do
      body = Random.new(1).bytes(300_000)
      Net::HTTP.start("127.0.0.1", server.port) do |http|
        echoed = JSON.parse(http.post("/echo", body).body)
        expect(echoed).to eq("size" => body.bytesize, "sha" => Digest::SHA256.hexdigest(body), "same" => true,
                             "encoding" => "ASCII-8BIT")
      end
      out = IO.popen(["curl", "-sS", "--max-time", "10", "-T", "-", "http://127.0.0.1:#{server.port}/echo"],
                     "r+") do |io|
        io.write(body)
        io.close_write
        io.read
      end
      expect(JSON.parse(out)).to include("size" => body.bytesize, "sha" => Digest::SHA256.hexdigest(body))
    end

    it "reads a raw chunked body with extensions and trailers, then the next request" do
      socket = raw(server)
      socket.write("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" \
                   "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n#{get_hello}")
      expect(JSON.parse(read_response(socket)[2])).to include("size" => 11,
                                                              "sha" => Digest::SHA256.hexdigest("hello world"))
      expect(read_response(socket)[2]).to eq("hello")
    end

    it "reads rack.input line by line" do
      socket = raw(server)
      socket.write("POST /lines HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\na\nbb\nccc\ndd\n")
      expect(read_response(socket)[2]).to eq("4")
    end

    it "answers Expect: 100-continue when the app reads the body (curl)" do
      out, status = curl("-i", "-H", "Expect: 100-continue", "--data-binary", "payload",
                         "http://127.0.0.1:#{server.port}/echo")
      expect(status).to be_success
      expect(out).to start_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
      socket = raw(server)
      socket.write("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
      expect(read_response(socket)[0]).to eq(100)
      socket.write("abc")
      expect(JSON.parse(read_response(socket)[2])["size"]).to eq(3)
    end

    it "closes, without a late 100 Continue, when the app answers without reading an expected body" do
      socket = raw(server)
      socket.write("POST /hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
      response = read_to_eof(socket)
      expect(response).to start_with("HTTP/1.1 200 OK\r\n").and end_with("\r\n\r\nhello")
      expect(response).not_to include("100 Continue")
    end

    it "serves curl's keep-alive and --http1.0" do
      url = "http://127.0.0.1:#{server.port}/hello"
      out, = curl("-w", " %{num_connects}\n", url, url) # rubocop:disable Style/FormatStringToken -- curl's
      expect(out).to eq("hello 1\nhello 0\n") # the second request reused the connection
      out, = curl("--http1.0", "-i", "http://127.0.0.1:#{server.port}/hello")
      expect(out).to include("connection: close").and end_with("hello")
    end

    it "streams a body that is called with the stream, then closes" do
      socket = raw(server)
      socket.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
      expect(read_to_eof(socket)).to end_with("\r\n\r\nstreamed body")
    end

    it "writes the head, then hands the connection to a response hijack (Rack 2's rack.hijack field)" do
      socket = raw(server)
      socket.write("GET /response_hijack HTTP/1.1\r\nHost: x\r\n\r\n")
      response = read_to_eof(socket)
      expect(response).to start_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n")
        .and end_with("connection: close\r\n\r\nraw bytes")
      expect(response).not_to include("rack.hijack")
    end

    it "hands the connection over on a full hijack" do
      socket = raw(server)
      socket.write("GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
      expect(read_to_eof(socket)).to eq("HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nhijacked")
    end

    it "answers an app's exception with a 500, logs the backtrace, and keeps the connection" do
      socket = raw(server)
      socket.write("GET /fail HTTP/1.1\r\nHost: x\r\n\r\n")
      status, _, body = read_response(socket)
      expect([status, body]).to eq([500, "Internal Server Error\n"])
      expect(body).not_to include("on purpose")
      socket.write(get_hello)
      expect(read_response(socket)[2]).to eq("hello")
      expect(server.stderr).to include("RuntimeError: the app failed on purpose (GET /fail)")
        .and match(/http_apps\.rb:\d+/)
    end

    it "closes the body also when the client went away mid-response" do
      before = Integer(Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/closed")))
      socket = raw(server)
      socket.setsockopt(:SOCKET, :RCVBUF, 4096)
      socket.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
      socket.read(100)
      socket.setsockopt(:SOCKET, :LINGER, [1, 0].pack("ii")) # a reset, as a client that went away
      socket.close
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
      closed = before
      while closed == before && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        sleep 0.05
        closed = Integer(Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/closed")))
      end
      expect(closed).to eq(before + 1)
    end

    it "runs the app's blocking calls concurrently (the fiber scheduler)" do
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      threads = Array.new(10) { Thread.new { Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/sleep?0.3")) } }
      expect(threads.map(&:value)).to all(eq("slept"))
      expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be < 2.0 # 10 in a row: 3 s
    end
  end

  describe "requests it refuses (400 and a close)" do
    around do |example|
      with_http_server do |server|
        @server = server
        example.run
      end
    end

    {
      "Content-Length with Transfer-Encoding" =>
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
      "two different Content-Lengths" =>
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
      "a non-numeric Content-Length" => "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3a\r\n\r\n",
      "a negative Content-Length" => "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
      "a Transfer-Encoding other than chunked" => "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
      "chunked not last" => "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
      "chunked twice" =>
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "an obs-folded field" => "GET /hello HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
      "a bare LF" => "GET /hello HTTP/1.1\nHost: x\n\n",
      "a space before a field's colon" => "GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n",
      "no Host in HTTP/1.1" => "GET /hello HTTP/1.1\r\n\r\n",
      "a bad chunk size" =>
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
      "chunk data without its CRLF" =>
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
      "a chunk extension past the limit" =>
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;#{"e" * 2000}\r\nhello\r\n0\r\n\r\n",
      "a request-target that is not a path" => "GET hello HTTP/1.1\r\nHost: x\r\n\r\n",
      "garbage" => "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"
    }.each do |shape, request|
      it "refuses #{shape}" do
        socket = raw(@server)
        socket.write(request)
        response = read_to_eof(socket)
        expect(response).to start_with("HTTP/1.1 400 Bad Request\r\n").and include("connection: close")
        expect(Net::HTTP.get(URI("http://127.0.0.1:#{@server.port}/hello"))).to eq("hello") # not wedged
      end
    end

    it "answers 505 to an HTTP version it does not speak" do
      socket = raw(@server)
      socket.write("GET /hello HTTP/2.0\r\nHost: x\r\n\r\n")
      expect(read_to_eof(socket)).to start_with("HTTP/1.1 505 HTTP Version Not Supported\r\n")
    end
  end

  describe "limits" do
    let(:limits) do
      { max_request_line: 100, max_head: 1024, max_headers: 5, max_body: 1000, header_timeout: 0.5,
        keep_alive_timeout: 0.5 }
    end

    around do |example|
      with_http_server(limits: limits) do |server|
        @server = server
        example.run
      end
    end

    def answer(request)
      socket = raw(@server)
      socket.write(request)
      read_to_eof(socket)[%r{\AHTTP/1.1 (\d+)}, 1]&.to_i
    end

    it "answers 414 past max_request_line" do
      expect(answer("GET /#{"a" * 70} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")).to eq(404)
      expect(answer("GET /#{"a" * 100} HTTP/1.1\r\nHost: x\r\n\r\n")).to eq(414)
    end

    it "answers 431 past max_headers and past max_head" do
      fields = ->(n) { Array.new(n) { |i| "X-#{i}: v\r\n" }.join }
      expect(answer("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n#{fields[3]}\r\n")).to eq(200)
      expect(answer("GET /hello HTTP/1.1\r\nHost: x\r\n#{fields[5]}\r\n")).to eq(431)
      expect(answer("GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: #{"v" * 1100}\r\n\r\n")).to eq(431)
    end

    it "answers 413 past max_body, by Content-Length and by chunks" do
      expect(answer("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")).to eq(413)
      chunks = "3e8\r\n#{"x" * 1000}\r\n1\r\nx\r\n0\r\n\r\n"
      expect(answer("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n#{chunks}")).to eq(413)
    end

    it "answers 408 to a head that does not arrive within header_timeout, and closes" do
      socket = raw(@server)
      socket.write("GET /hello HTTP/1.1\r\nHost")
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      expect(read_to_eof(socket)).to start_with("HTTP/1.1 408 Request Timeout\r\n")
      expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be_between(0.3, 3)
    end

    it "closes an idle kept-alive connection after keep_alive_timeout, silently" do
      socket = raw(@server)
      socket.write(get_hello)
      expect(read_response(socket)[2]).to eq("hello")
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      expect(read_to_eof(socket)).to eq("")
      expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be_between(0.3, 3)
    end
  end

  it "stops accepting past max_connections, and goes on when one closes" do
    with_http_server(limits: { max_connections: 2 }) do |server|
      first = raw(server)
      second = raw(server)
      [first, second].each do |socket|
        socket.write(get_hello)
        expect(read_response(socket)[2]).to eq("hello")
      end
      third = raw(server) # the kernel's backlog takes it
      third.write(get_hello)
      expect(third.wait_readable(0.5)).to be_nil
      first.close
      expect(read_response(third)[2]).to eq("hello")
    end
  end

  it "serves HTTPS with rack.url_scheme https" do
    with_http_server(tls: true) do |server|
      require "openssl"
      http = Net::HTTP.new("127.0.0.1", server.port)
      http.use_ssl = true
      http.verify_mode = OpenSSL::SSL::VERIFY_NONE
      http.start do
        expect(JSON.parse(http.get("/env").body)["rack.url_scheme"]).to eq("https")
        expect(http.get("/hello").body).to eq("hello")
      end
    end
  end

  it "serves a UNIX socket" do
    Dir.mktmpdir("evix-http-") do |dir|
      path = File.join(dir, "s.sock")
      ServerProcess.run("evix serve", [HTTPHelpers::APPS, JSON.generate(binds: ["tcp://127.0.0.1:0", "unix:#{path}"])],
                        ready: /listening on .*:(\d+)\z/) do |_server|
        out, status = curl("--unix-socket", path, "http://localhost/hello")
        expect([out, status.success?]).to eq(["hello", true])
      end
    end
  end

  it "holds up under wrk and ab, with no error" do
    skip "wrk not installed" unless system("which wrk > /dev/null 2>&1")
    with_http_server do |server|
      out = IO.popen(["wrk", "-t1", "-c20", "-d1s", "http://127.0.0.1:#{server.port}/hello"], &:read)
      expect(out).to match(%r{Requests/sec:})
      expect(out).not_to match(/Socket errors|Non-2xx/)
      if system("which ab > /dev/null 2>&1")
        out = IO.popen(["ab", "-k", "-n", "2000", "-c", "10", "http://127.0.0.1:#{server.port}/hello"],
                       err: %i[child out], &:read)
        expect(out).to match(/Failed requests:\s+0/).and match(/Keep-Alive requests:\s+2000/)
      end
    end
  end
end
