# frozen_string_literal: true

# User-space instructions per echo round trip of one bench server, counted by
# cachegrind: unlike time, the count barely moves on a busy machine. The
# server runs under `valgrind --tool=cachegrind --cache-sim=no` twice, fed by
# the load generator with SMALL and then LARGE round trips over CONNECTIONS
# connections, and is stopped with SIGTERM; start-up, accepting and shutdown
# cancel out in (Ir(LARGE) - Ir(SMALL)) / (LARGE - SMALL).
#
#   ruby bench/instructions.rb SERVER [CONNECTIONS [SMALL LARGE]]
#   ruby bench/instructions.rb evix_fiber 100          # 5,000 and 25,000
#   ruby bench/instructions.rb evix_scheduler 1000 20000 120000
#
# SERVER is a file of bench/servers/ (or "ceiling"). With few round trips per
# connection the timing of the GC moves the figure by several hundred.

require_relative "support/harness"

module Instructions
  module_function

  def run(server, connections, small, large)
    Harness.build_loadgen!
    counts = [small, large].map { |round_trips| count(server, connections, round_trips) }
    per_round_trip = (counts[1] - counts[0]).fdiv(large - small)
    puts format("%<server>s, %<connections>d connections: %<ir>.0f instructions per round trip " \
                "(Ir %<small>d and %<large>d round trips: %<counts>s)",
                server: server, connections: connections, ir: per_round_trip, small: small, large: large,
                counts: counts.join(" / "))
  end

  # Total Ir of one server process that served +round_trips+.
  def count(server, connections, round_trips)
    out = File.join(Dir.tmpdir, "evix-cachegrind-#{Process.pid}-#{round_trips}.out")
    port = Harness.free_port
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=#{out}",
               *server_command(server, port)]
    server_process = Harness::Child.new(command, cpu: Harness::SERVER_CPU)
    server_process.expect(/\Aready\b/, Harness::READY_TIMEOUT)
    Harness.run_loadgen(["echo", "--port", port, "--connections", connections, "--size", 64,
                         "--warmup", 0, "--count", round_trips], timeout: 600)
    # valgrind writes its counts on the way out: give it time.
    server_process.finish(grace: 60)
    total(out)
  ensure
    server_process&.cleanup
    FileUtils.rm_f(out) if out
  end

  def server_command(server, port)
    return [Harness.ceiling, port, "echo"] if server == "ceiling"

    script = File.join(Harness::ROOT, "bench", "servers", "#{server}.rb")
    abort "no such server: #{script}" unless File.exist?(script)
    Harness.ruby_command(script, port, "echo")
  end

  def total(out)
    summary = File.foreach(out).find { |line| line.start_with?("summary:") }
    raise Harness::Failure, "cachegrind wrote no summary to #{out}" unless summary

    Integer(summary.split[1])
  end
end

if $PROGRAM_NAME == __FILE__
  server = ARGV[0] or abort "usage: ruby bench/instructions.rb SERVER [CONNECTIONS [SMALL LARGE]]"
  connections = Integer(ARGV[1] || 100)
  small = Integer(ARGV[2] || (connections * 50))
  large = Integer(ARGV[3] || (connections * 250))
  Instructions.run(server, connections, small, large)
end
