# frozen_string_literal: true

require "spec_helper"
require_relative "../../../support/app_examples"

reason = AppServer.unavailable_reason("sinatra/base", needs: "Sinatra::VERSION >= '4'")
RSpec.describe "A Sinatra 4 app (spec/fixtures/apps/sinatra.ru) under Rack::Lint", skip: reason do
  # One server for the group (an app like Rails takes seconds to boot); an
  # example that kills it fails the ones after it, which then say so.
  before(:context) { @server = AppServer.new("sinatra") }
  after(:context) { @server&.stop }

  let(:server) { @server }
  let(:hello) { "hello" }

  it_behaves_like "a Rack app served to real clients"

  it "routes with a path parameter and a query string" do
    response = Net::HTTP.get_response(URI(server.url("/hello/evix?punctuation=%21")))
    expect([response.code, response.body]).to eq(["200", "hello evix!"])
  end

  it "answers 404 for an unknown route and keeps serving" do
    expect(Net::HTTP.get_response(URI(server.url("/nowhere"))).code).to eq("404")
    expect(Net::HTTP.get(URI(server.url))).to eq("hello")
  end

  it "answers HEAD with the headers only" do
    out, status = AppServer.client("curl", "-sS", "-I", "-m", "20", server.url)
    expect(status).to be_success, out
    expect(out).to match(%r{\AHTTP/1\.1 200})
    expect(out).not_to include("hello")
  end

  it "reads a chunked upload sent after Expect: 100-continue" do
    body = "line #{"x" * 40}\n" * 2000
    out, status = Open3.capture2e("timeout", "30", "curl", "-sS", "-X", "POST", "-T", "-", "-H",
                                  "Expect: 100-continue", "-H", "content-type: application/octet-stream",
                                  server.url("/echo"), stdin_data: body)
    expect(status).to be_success, out
    expect(out).to eq(body)
  end
end
