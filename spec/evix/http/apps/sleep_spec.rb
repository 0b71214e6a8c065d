# frozen_string_literal: true

require "spec_helper"
require_relative "../../../support/app_examples"

reason = AppServer.unavailable_reason("rack")
RSpec.describe "An app that sleeps (spec/fixtures/apps/sleep.ru) under Rack::Lint", skip: reason do
  it "overlaps 100 concurrent requests of 0.1 s each: well under the 10 s one at a time would take" do
    AppServer.run("sleep", env: { "EVIX_APP_SLEEP" => "0.1" }) do |server|
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      out, status = AppServer.client("ab", "-q", "-n", "100", "-c", "100", "-s", "20", server.url)
      elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      expect(status).to be_success, out
      expect(out).to match(/^Complete requests:\s+100$/)
      expect(out).to match(/^Failed requests:\s+0$/)
      # Ideally 0.1 s; a loaded machine gets room, serial work (10 s) or five threads (2 s) none.
      expect(elapsed).to be_between(0.1, 1.5)
    end
  end
end
