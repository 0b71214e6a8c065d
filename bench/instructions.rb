# frozen_string_literal: true

# User-space instructions per echo round trip (or per HTTP request) of one
# bench server, counted by cachegrind: unlike time, the count barely moves on
# a busy machine (EVIX_BENCH_KEEP_PROFILE=1 keeps both cachegrind outputs in the
# temporary directory, for cg_diff and cg_annotate). The server runs under `valgrind --tool=cachegrind
# --cache-sim=no` twice, loaded with SMALL and then LARGE units of work, and
# is stopped with SIGTERM; start-up, accepting and shutdown cancel out in
# (Ir(LARGE) - Ir(SMALL)) / (served(LARGE) - served(SMALL)).
#
#   ruby bench/instructions.rb [--http] SERVER [CONNECTIONS [SMALL LARGE]]
#   ruby bench/instructions.rb evix_fiber 100          # 5,000 and 25,000 round trips
#   ruby bench/instructions.rb evix_scheduler 1000 20000 120000
#   ruby bench/instructions.rb --http nio4r            # wrk -c100 for 5 s and for 20 s
#
# SERVER is a file of bench/servers/ (or "ceiling"). Echo: SMALL and LARGE
# are round trips of the load generator (64-byte messages). --http: the HTTP
# hello workload, SMALL and LARGE are seconds of `wrk -t1 -cCONNECTIONS`,
# and the requests wrk counts are the units. With few round trips per
# connection the timing of the GC moves the figure by several hundred.

require_relative "support/harness"

module Instructions
  module_function

  def run(workload, server, connections, small, large)
    Harness.build_loadgen! unless ENV["EVIX_BENCH_PREBUILT"] == "1"
    samples = [small, large].map { |load| send(workload, server, connections, load) }
    (small_ir, small_served), (large_ir, large_served) = samples
    per_unit = (large_ir - small_ir).fdiv(large_served - small_served)
    unit = workload == :http ? "request" : "round trip"
    puts format("%<server>s, %<connections>d connections: %<ir>.0f instructions per %<unit>s " \
                "(Ir / %<unit>ss served: %<samples>s)",
                server: server, connections: connections, ir: per_unit, unit: unit,
                samples: samples.map { |ir, served| "#{ir} / #{served}" }.join(", "))
  end

  # [Ir, round trips] of a server process that echoed +round_trips+.
  def echo(server, connections, round_trips)
    count(server, "echo") do |port|
      Harness.run_loadgen(["echo", "--port", port, "--connections", connections, "--size", 64,
                           "--warmup", 0, "--count", round_trips], timeout: 600)
      round_trips
    end
  end

  # [Ir, requests] of a server process that wrk loaded for +seconds+.
  def http(server, connections, seconds)
    count(server, "http") do |port|
      result = Harness.run_wrk(port, connections: connections, seconds: seconds)
      # A slow server under valgrind can time some requests out: they are not counted.
      warn "instructions: wrk saw #{result["errors"]} errors or timeouts" if result["errors"].positive?
      result["requests"]
    end
  end

  # [total Ir, what the block returns] of one server process in +mode+,
  # loaded by the block (given the port).
  def count(server, mode)
    out = File.join(Dir.tmpdir, "evix-cachegrind-#{Process.pid}-#{Harness.now}.out")
    port = Harness.free_port
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=#{out}",
               *server_command(server, port, mode)]
    server_process = Harness::Child.new(command, cpu: Harness::SERVER_CPU)
    server_process.expect(/\Aready\b/, Harness::READY_TIMEOUT)
    served = yield port
    # valgrind writes its counts on the way out: give it time.
    server_process.finish(grace: 60)
    [total(out), served]
  ensure
    server_process&.cleanup
    FileUtils.rm_f(out) if out && !ENV["EVIX_BENCH_KEEP_PROFILE"]
  end

  def server_command(server, port, mode)
    return [Harness.ceiling, port.to_s, mode] if server == "ceiling"

    script = File.join(Harness::ROOT, "bench", "servers", "#{server}.rb")
    abort "no such server: #{script}" unless File.exist?(script)
    Harness.ruby_command(script, port, mode)
  end

  def total(out)
    summary = File.foreach(out).find { |line| line.start_with?("summary:") }
    raise Harness::Failure, "cachegrind wrote no summary to #{out}" unless summary

    Integer(summary.split[1])
  end
end

if $PROGRAM_NAME == __FILE__
  workload = ARGV.delete("--http") ? :http : :echo
  server = ARGV[0] or abort "usage: ruby bench/instructions.rb [--http] SERVER [CONNECTIONS [SMALL LARGE]]"
  connections = Integer(ARGV[1] || 100)
  small, large = if workload == :http
                   [Integer(ARGV[2] || 5), Integer(ARGV[3] || 20)]
                 else
                   [Integer(ARGV[2] || (connections * 50)), Integer(ARGV[3] || (connections * 250))]
                 end
  Instructions.run(workload, server, connections, small, large)
end
