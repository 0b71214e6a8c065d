# frozen_string_literal: true

require_relative "app_server"

# What every app spec checks with real clients: curl reusing one connection
# and speaking HTTP/1.0, Net::HTTP keeping its connection, ab with keep-alive
# at 50 concurrent connections. Expects `server` (an AppServer) and `hello`
# (the body of GET /).
RSpec.shared_examples "a Rack app served to real clients" do
  it "answers curl twice on one kept-alive connection" do
    out, status = AppServer.client("curl", "-sS", "-v", "-m", "20", server.url, server.url)
    expect(status).to be_success, out
    expect(out.scan(%r{^< HTTP/1\.1 200}).size).to eq(2), out
    expect(out).to match(/Re-?using existing .*connection/i)
    expect(out.scan(hello).size).to be >= 2
  end

  it "answers an HTTP/1.0 request and closes" do
    out, status = AppServer.client("curl", "-sS", "-i", "--http1.0", "-m", "20", server.url)
    expect(status).to be_success, out
    expect(out).to match(%r{\AHTTP/1\.[01] 200})
    expect(out).to end_with(hello)
  end

  it "keeps a Net::HTTP connection for several requests" do
    bodies = Net::HTTP.start(AppServer::HOST, server.port, read_timeout: 20) do |http|
      Array.new(3) { http.get("/").tap { |response| expect(response.code).to eq("200") }.body }
    end
    expect(bodies).to eq([hello] * 3)
  end

  it "answers 1,000 requests from ab at 50 kept-alive connections, none failed" do
    out, status = AppServer.client("ab", "-q", "-k", "-n", "1000", "-c", "50", "-s", "20", server.url)
    expect(status).to be_success, out
    expect(out).to match(/^Complete requests:\s+1000$/)
    expect(out).to match(/^Failed requests:\s+0$/)
    expect(out).to match(/^Keep-Alive requests:\s+\d+$/)
    expect(out).not_to match(/Non-2xx/)
    expect(server).to be_alive
  end
end
