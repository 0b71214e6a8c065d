# frozen_string_literal: true

# redis-benchmark against `exe/evix kv` (the example key-value server, which
# speaks RESP) beside the same run against Debian's redis-server, the C event
# loop every Ruby server gets measured against. Prints a Markdown table of
# requests per second and the ratio evix/redis.
#
#   ruby bench/redis.rb [REQUESTS]        # default 100000 requests per test
#
# Each server runs alone, pinned to CPU 0 on a free loopback port;
# `redis-benchmark -t set,get -n REQUESTS -c 50 -q` runs pinned to CPU 1.
# The servers take turns for EVIX_BENCH_ROUNDS rounds (default 3) and each
# figure is the median, so that a burst of load on a shared machine spoils
# one run rather than the table. Needs taskset, redis-server and
# redis-benchmark (Debian's redis-server and redis-tools).

require_relative "support/harness"

# The redis-benchmark comparison.
module RedisBench
  REQUESTS = Integer(ARGV.fetch(0, "100000"))
  CLIENTS = 50
  ROUNDS = Integer(ENV.fetch("EVIX_BENCH_ROUNDS", "3"))
  TESTS = %w[SET GET].freeze
  SERVERS = {
    "evix kv" => lambda { |port|
      [[RbConfig.ruby, File.join(Harness::ROOT, "exe", "evix"), "kv", "--port", port.to_s], /listening on/]
    },
    "redis-server" => lambda { |port|
      [["redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
       /Ready to accept connections/]
    }
  }.freeze

  module_function

  def run
    rates = Hash.new { |hash, key| hash[key] = Hash.new { |h, k| h[k] = [] } }
    ROUNDS.times do
      SERVERS.each_key do |name|
        measure(name).each { |test, rate| rates[name][test] << rate }
      end
    end
    puts table(rates.transform_values { |tests| tests.transform_values { |runs| median(runs) } })
  end

  # @return [Hash{String=>Float}] requests per second of each test
  def measure(name)
    port = Harness.free_port
    command, ready = SERVERS.fetch(name).call(port)
    server = Harness::Child.new(command, cpu: Harness::SERVER_CPU)
    server.expect(ready, Harness::READY_TIMEOUT)
    benchmark(port)
  ensure
    server&.finish
    server&.cleanup
  end

  def benchmark(port)
    command = ["taskset", "-c", Harness::CLIENT_CPU, "redis-benchmark", "-h", "127.0.0.1", "-p", port.to_s,
               "-t", TESTS.join(",").downcase, "-n", REQUESTS.to_s, "-c", CLIENTS.to_s, "-q"]
    out = IO.popen(command, err: %i[child out], &:read)
    raise Harness::Failure, "redis-benchmark failed: #{out}" unless Process.last_status.success?

    # -q rewrites a progress line with \r; the results are "SET: 123.45 requests per second, ...".
    rates = out.scan(/(#{TESTS.join("|")}): ([\d.]+) requests per second/o).to_h.transform_values { |rate| Float(rate) }
    raise Harness::Failure, "no #{TESTS.join("/")} figures in: #{out}" unless rates.keys == TESTS

    rates
  end

  def median(values)
    sorted = values.sort
    (sorted[(sorted.size - 1) / 2] + sorted[sorted.size / 2]) / 2.0
  end

  def table(rates)
    evix, redis = rates.values_at("evix kv", "redis-server")
    rows = TESTS.map do |test|
      format("| %<test>s | %<evix>.0f | %<redis>.0f | %<ratio>.2f |",
             test: test, evix: evix[test], redis: redis[test], ratio: evix[test] / redis[test])
    end
    <<~TABLE
      redis-benchmark -t set,get -n #{REQUESTS} -c #{CLIENTS}, median of #{ROUNDS} round(s); servers on CPU 0, client on CPU 1

      | test | evix kv (req/s) | redis-server (req/s) | evix/redis |
      | --- | ---: | ---: | ---: |
      #{rows.join("\n")}
    TABLE
  end
end

RedisBench.run if $PROGRAM_NAME == __FILE__
