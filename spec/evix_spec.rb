# frozen_string_literal: true

require "spec_helper"

# lib/evix.rb: what `require "evix"` loads.
RSpec.describe "require \"evix\"" do
  let(:kit) { %w[server tcp_server tcp_client unix_server unix_client workers tls] }

  it "loads the loop, tasks and the scheduler, and the server kit and TLS only on first use" do
    run = run_ruby(<<~RUBY)
      kit = -> { $LOADED_FEATURES.filter_map { |f| f[%r{/evix/(#{kit.join("|")})\\.rb\\z}, 1] }.sort }
      puts kit.call.inspect
      puts [Evix::Loop, Evix::Scheduler, Evix::Task, Evix::IO].map(&:name).inspect
      puts Evix::TCPServer.ancestors.include?(Evix::Server)
      puts kit.call.inspect
      puts [Evix::UNIXServer, Evix::UNIXClient, Evix::TCPClient, Evix::Workers, Evix::TLS::Acceptor].size
      puts kit.call.inspect
    RUBY
    expect(run.status).to be_success, run.err
    expect(run.out.lines.map(&:chomp)).to eq([
                                               "[]",
                                               '["Evix::Loop", "Evix::Scheduler", "Evix::Task", "Evix::IO"]',
                                               "true",
                                               '["server", "tcp_server"]',
                                               "5",
                                               kit.sort.inspect
                                             ])
  end
end
