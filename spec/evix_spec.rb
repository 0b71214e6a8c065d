# frozen_string_literal: true

require "spec_helper"

# lib/evix.rb: what `require "evix"` loads.
RSpec.describe "require \"evix\"" do
  it "loads every part of evix but TLS, which loads (with openssl) on first use" do
    run = run_ruby(<<~RUBY)
      tls = -> { $LOADED_FEATURES.grep(%r{/evix/net/tls\\.rb\\z|/openssl\\.rb\\z}).size }
      puts tls.call
      puts [Evix::Loop, Evix::Scheduler, Evix::TCPServer, Evix::UNIXClient, Evix::Workers].map(&:name).inspect
      puts tls.call
      puts Evix::TLS::Acceptor.name
      puts tls.call
    RUBY
    expect(run.status).to be_success, run.err
    expect(run.out.lines.map(&:chomp)).to eq(
      ["0", '["Evix::Loop", "Evix::Scheduler", "Evix::TCPServer", "Evix::UNIXClient", "Evix::Workers"]', "0",
       "Evix::TLS::Acceptor", "2"]
    )
  end
end
