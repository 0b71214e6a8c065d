# frozen_string_literal: true

require "spec_helper"
require_relative "../../../support/app_examples"

reason = AppServer.unavailable_reason("rack")
RSpec.describe "The Rack hello app (spec/fixtures/apps/hello.ru) under Rack::Lint", skip: reason do
  # One server for the group (an app like Rails takes seconds to boot); an
  # example that kills it fails the ones after it, which then say so.
  before(:context) { @server = AppServer.new("hello") }
  after(:context) { @server&.stop }

  let(:server) { @server }
  let(:hello) { "hello" }

  it_behaves_like "a Rack app served to real clients"

  it "sends the app's content-type and a length or chunked framing" do
    response = Net::HTTP.get_response(URI(server.url("/any/path?x=1")))
    expect(response.code).to eq("200")
    expect(response["content-type"]).to eq("text/plain")
    expect(response.body).to eq("hello")
  end
end
