# frozen_string_literal: true

require "spec_helper"
require_relative "../../../support/app_examples"

reason = AppServer.unavailable_reason("rack")
RSpec.describe "The Rack hello app (spec/fixtures/apps/hello.ru) under Rack::Lint", skip: reason do
  around do |example|
    AppServer.run("hello") do |server|
      @server = server
      example.run
    end
  end

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
