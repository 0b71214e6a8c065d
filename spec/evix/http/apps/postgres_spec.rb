# frozen_string_literal: true

require "spec_helper"
require_relative "../../../support/app_server"
require_relative "../../../fixtures/apps/postgres_cluster"

reason = AppServer.unavailable_reason("pg") || EvixApps::PostgresCluster.unavailable_reason
RSpec.describe "A PostgreSQL app (spec/fixtures/apps/pg.ru): ruby-pg over a pool of 20 connections", skip: reason do
  around do |example|
    EvixApps::PostgresCluster.start do |cluster|
      @cluster = cluster
      AppServer.run("pg", env: cluster.env) do |server|
        @server = server
        example.run
      end
    end
  end

  let(:server) { @server }

  def client_backends
    Integer(@cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")) - 1
  end

  it "runs 100 concurrent pg_sleep(0.05) in about 5 x 50 ms, not 100 x 50 ms, on at most 20 connections" do
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    out, status = AppServer.client("ab", "-q", "-n", "100", "-c", "100", "-s", "20", server.url("/?sleep=0.05"))
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    expect(status).to be_success, out
    expect(out).to match(/^Complete requests:\s+100$/)
    expect(out).to match(/^Failed requests:\s+0$/)
    # 100 queries on 20 connections: five rounds of 50 ms at best; one at a time would be 5 s.
    expect(elapsed).to be_between(0.24, 2.0)
    expect(client_backends).to eq(20)
  end

  it "answers a bad parameter with 400 without touching the database" do
    response = Net::HTTP.get_response(URI(server.url("/?sleep=forever")))
    expect(response.code).to eq("400")
    expect(Net::HTTP.get(URI(server.url("/?sleep=0")))).to eq("slept")
  end
end
