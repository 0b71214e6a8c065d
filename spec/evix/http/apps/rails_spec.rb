# frozen_string_literal: true

require "spec_helper"
require "json"
require_relative "../../../support/app_examples"

reason = AppServer.unavailable_reason("rails", "action_controller/railtie", needs: "Rails.version >= '7.2'")
RSpec.describe "A Rails 7.2 API-only app (spec/fixtures/apps/rails.ru) under Rack::Lint", skip: reason do
  # One server for the group (an app like Rails takes seconds to boot); an
  # example that kills it fails the ones after it, which then say so.
  before(:context) { @server = AppServer.new("rails") }
  after(:context) { @server&.stop }

  let(:server) { @server }
  let(:hello) { "hello" }

  it_behaves_like "a Rack app served to real clients"

  it "keeps Rails' per-request state per fiber, as configured" do
    expect(Net::HTTP.get(URI(server.url("/isolation")))).to eq("fiber")
  end

  it "routes to a JSON action" do
    response = Net::HTTP.get_response(URI(server.url("/hello/evix")))
    expect(response.code).to eq("200")
    expect(response["content-type"]).to start_with("application/json")
    expect(JSON.parse(response.body)).to eq("hello" => "evix")
  end

  it "reads a request body" do
    response = Net::HTTP.post(URI(server.url("/echo")), "a=1&b=#{"z" * 10_000}",
                              "content-type" => "application/octet-stream")
    expect(response.code).to eq("200")
    expect(JSON.parse(response.body)).to eq("received" => "a=1&b=#{"z" * 10_000}")
  end

  it "answers 404 for an unknown route and keeps serving" do
    expect(Net::HTTP.get_response(URI(server.url("/nowhere"))).code).to eq("404")
    expect(Net::HTTP.get(URI(server.url))).to eq("hello")
  end
end
