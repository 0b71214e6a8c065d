# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

# The example servers behave like tools: quiet while they serve, a line per
# connection opened and closed with --verbose, and one line on stderr when
# SIGTERM has drained them (how long it took, how many connections).
RSpec.describe "The example servers' logs" do
  shutdown_line = /\Aevix (\w+): shut down in \d+\.\d\ds: (\d+) connection\(s\) drained, (\d+) cut at the 5s deadline\z/

  %w[echo chat kv].each do |name|
    describe "evix #{name}" do
      # Runs in an empty directory: nothing there for a server to read.
      def run_example(name, *args, &)
        Dir.mktmpdir("evix-logs-") { |dir| ExampleProcess.run(name, *args, chdir: dir, &) }
      end

      it "logs nothing while it serves, then one line once SIGTERM drained its connections" do
        run_example(name) do |server|
          client = server.connect
          client.puts("PING") # echo answers it, kv too, chat tells nobody
          sleep 0.3
          expect(server.stderr).to be_empty
          server.signal(:TERM)
          expect(server.wait.exitstatus).to eq(0)
          lines = server.stderr.lines(chomp: true)
          expect(lines.size).to eq(1), server.stderr
          expect(lines.first).to match(shutdown_line)
          expect(lines.first.match(shutdown_line).captures).to eq([name, "1", "0"])
        end
      end

      it "with --verbose logs each connection opened and closed with its address and how many are open" do
        run_example(name, "--verbose") do |server|
          first = server.connect
          peer = "127.0.0.1:#{first.io.local_address.ip_port}"
          wait_until(timeout: 5) { server.stderr.include?("#{peer} connected") }
          second = server.connect
          wait_until(timeout: 5) { server.stderr.lines.size == 2 }
          first.close
          wait_until(timeout: 5) { server.stderr.include?("#{peer} disconnected") }
          lines = server.stderr.lines(chomp: true)
          expect(lines[0]).to eq("evix #{name}: #{peer} connected (1 open)")
          expect(lines[1]).to eq("evix #{name}: 127.0.0.1:#{second.io.local_address.ip_port} connected (2 open)")
          expect(lines[2]).to eq("evix #{name}: #{peer} disconnected (1 open)")
          server.signal(:TERM)
          expect(server.wait.exitstatus).to eq(0)
          expect(server.stderr.lines(chomp: true).last).to match(shutdown_line)
        end
      end
    end
  end
end
