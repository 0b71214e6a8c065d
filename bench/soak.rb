# frozen_string_literal: true

# rubocop:disable Style/FormatStringToken, Metrics/AbcSize -- a report script: printf tables

# The soak test (rake soak): the evix fiber echo server (`exe/evix echo`) in a
# child process, N concurrent connections from separate client processes for
# D seconds, random message sizes, every echoed byte checked; the server's
# RSS and descriptor count are sampled every second. Prints a table and a
# verdict, and exits 1 unless the run passed:
#
#   - no client error, no wrong byte, every message echoed completely;
#   - RSS flat after warm-up: the last third's maximum within 10 % of the
#     middle third's (the first third is warm-up);
#   - descriptors flat the same way, and back to the idle count once the
#     clients closed; the server exits 0 on SIGTERM.
#
# Environment (defaults in brackets):
#   EVIX_SOAK_CONNECTIONS [10000]  concurrent connections, all open at once
#   EVIX_SOAK_DURATION    [60]     seconds of load after every connection is open
#   EVIX_SOAK_MIN_SIZE    [1]      message size range in bytes, uniform
#   EVIX_SOAK_MAX_SIZE    [65536]
#   EVIX_SOAK_CLIENTS     [2]      client processes sharing the connections
#   EVIX_SOAK_SEED        [random] seeds the sizes and contents
#   EVIX_SOAK_TOLERANCE   [0.10]   allowed growth of the last third over the middle one
#
# The clients use nio4r (not evix), so a bug in evix cannot hide itself in
# the client. bench/loadgen (the Rust load generator) sends fixed-size
# messages only, hence this client.

require "etc"
require "json"
require "rbconfig"
require "socket"

module Soak
  ROOT = File.expand_path("..", __dir__)

  def self.now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def self.env(name, default, conversion = :Integer)
    Kernel.send(conversion, ENV.fetch(name, default.to_s))
  end

  # One client process: +count+ connections driven by one nio4r selector.
  # Every second it prints a JSON line of cumulative counters on stdout.
  class Client
    CONNECT_WINDOW = 256 # connects in progress at once
    DRAIN = 15 # seconds allowed for the messages in flight at the end

    # A connection: one message in flight at a time, written and read concurrently.
    Conn = Struct.new(:socket, :monitor, :message, :sent, :received, :connected, keyword_init: true)

    def initialize(port:, count:, duration:, min_size:, max_size:, seed:)
      require "nio"
      @address = Socket.sockaddr_in(port, "127.0.0.1")
      @count = count
      @duration = duration
      @sizes = min_size..max_size
      @random = Random.new(seed)
      @pattern = @random.bytes(2 * max_size).freeze
      @max_size = max_size
      @selector = NIO::Selector.new
      @buffer = String.new(capacity: 65_536, encoding: Encoding::BINARY)
      @stats = Hash.new(0)
      @conns = []
    end

    def run
      @started = Soak.now
      @next_report = @started + 1
      open_all
      @load_until = Soak.now + @duration
      pump(until_time: @load_until) { false }
      @draining = true
      pump(until_time: Soak.now + DRAIN) { @conns.none?(&:message) }
      @stats[:incomplete] = @conns.count(&:message)
      close_all
      report(final: true)
    end

    private

    def open_all
      pending = 0
      opened = 0
      until opened == @count && pending.zero?
        while opened < @count && pending < CONNECT_WINDOW
          start_connect
          opened += 1
          pending += 1
        end
        pending = @conns.count { |c| c.monitor && !c.connected }
        tick(0.05)
        raise "connections stalled while opening" if Soak.now - @started > 120
      end
    end

    def start_connect
      socket = Socket.new(:INET, :STREAM)
      socket.connect_nonblock(@address, exception: false)
      conn = Conn.new(socket: socket, sent: 0, received: 0, connected: false)
      conn.monitor = @selector.register(socket, :w)
      conn.monitor.value = conn
      @conns << conn
    end

    def pump(until_time:)
      tick([until_time - Soak.now, 0.05].min) while Soak.now < until_time && !yield
    end

    def tick(timeout)
      @selector.select([timeout, 0.001].max) do |monitor|
        conn = monitor.value
        handle(conn, monitor.readiness)
      rescue SystemCallError, IOError => e
        failed(conn, e)
      end
      report if Soak.now >= @next_report
    end

    def handle(conn, readiness)
      unless conn.connected
        return unless %i[w rw].include?(readiness)

        errno = conn.socket.getsockopt(:SOCKET, :ERROR).int
        raise SystemCallError.new("connect", errno) unless errno.zero?

        conn.connected = true
        @stats[:open] += 1
        next_message(conn)
      end
      write_some(conn) if %i[w rw].include?(readiness) && conn.message
      read_some(conn) if %i[r rw].include?(readiness)
    end

    def next_message(conn)
      if @draining || Soak.now >= (@load_until || Float::INFINITY)
        conn.message = nil
        conn.monitor.interests = :r
        return
      end
      size = @random.rand(@sizes)
      conn.message = @pattern.byteslice(@random.rand(0..@max_size), size)
      conn.sent = 0
      conn.received = 0
      write_some(conn)
    end

    def write_some(conn)
      while conn.sent < conn.message.bytesize
        written = conn.socket.write_nonblock(conn.message.byteslice(conn.sent, 65_536), exception: false)
        break if written == :wait_writable

        conn.sent += written
        @stats[:bytes_out] += written
      end
      conn.monitor.interests = conn.sent < conn.message.bytesize ? :rw : :r
    end

    def read_some(conn)
      loop do
        chunk = conn.socket.read_nonblock(65_536, @buffer, exception: false)
        return if chunk == :wait_readable
        raise EOFError, "the server closed the connection" if chunk.nil?

        verify(conn, chunk)
        return unless conn.monitor # closed as a failure
      end
    end

    def verify(conn, chunk)
      message = conn.message
      if message.nil? || conn.received + chunk.bytesize > message.bytesize ||
         message.byteslice(conn.received, chunk.bytesize) != chunk
        @stats[:mismatches] += 1
        return failed(conn, RuntimeError.new("wrong bytes"))
      end
      conn.received += chunk.bytesize
      @stats[:bytes_in] += chunk.bytesize
      return unless conn.received == message.bytesize

      @stats[:trips] += 1
      next_message(conn)
    end

    def failed(conn, error)
      @stats[:errors] += 1
      @stats["error #{error.class}"] += 1
      close(conn)
    end

    def close(conn)
      return unless conn.monitor

      @stats[:open] -= 1 if conn.connected
      conn.monitor.close
      conn.monitor = nil
      conn.socket.close
      conn.message = nil
    end

    def close_all
      @conns.each { |conn| close(conn) }
    end

    def report(final: false)
      @next_report += 1 while @next_report <= Soak.now
      line = @stats.merge(t: (Soak.now - @started).round(2), final: final)
      $stdout.puts(JSON.generate(line))
      $stdout.flush
    end
  end

  # Starts the server and the clients, samples, prints, judges.
  class Driver
    def initialize
      @connections = Soak.env("EVIX_SOAK_CONNECTIONS", 10_000)
      @duration = Soak.env("EVIX_SOAK_DURATION", 60, :Float)
      @min_size = Soak.env("EVIX_SOAK_MIN_SIZE", 1)
      @max_size = Soak.env("EVIX_SOAK_MAX_SIZE", 65_536)
      @clients = [Soak.env("EVIX_SOAK_CLIENTS", 2), 1].max
      @seed = Soak.env("EVIX_SOAK_SEED", Random.new_seed % (2**31))
      @tolerance = Soak.env("EVIX_SOAK_TOLERANCE", 0.10, :Float)
      @samples = []
      @latest = {}
    end

    def run
      puts format("evix soak: %<n>d connections, %<d>gs, sizes %<a>d..%<b>d B, %<c>d client processes, seed %<s>d",
                  n: @connections, d: @duration, a: @min_size, b: @max_size, c: @clients, s: @seed)
      start_server
      @idle_fds = fd_count
      @idle_rss = rss_kib
      start_clients
      header
      sample_until_clients_finish
      finish
    ensure
      stop_everything
    end

    private

    def nofile
      [@connections + 4096, 65_536].min.then { |n| [n, n] }
    end

    def start_server
      @server_out, out = IO.pipe
      @server_pid = Process.spawn(RbConfig.ruby, "-I", File.join(ROOT, "lib"), File.join(ROOT, "exe", "evix"),
                                  "echo", "--port", "0", out: out, rlimit_nofile: nofile)
      out.close
      raise "the server did not start" unless @server_out.wait_readable(20)

      banner = @server_out.gets.to_s
      @port = Integer(banner[/:(\d+)\s*\z/, 1] || raise("unexpected banner #{banner.inspect}"))
    end

    def start_clients
      share, extra = @connections.divmod(@clients)
      @client_pipes = Array.new(@clients) do |i|
        count = share + (i < extra ? 1 : 0)
        reader, writer = IO.pipe
        argv = [RbConfig.ruby, __FILE__, "--client", @port.to_s, count.to_s, @duration.to_s,
                @min_size.to_s, @max_size.to_s, (@seed + i).to_s]
        pid = unbundled { Process.spawn(*argv, out: writer, rlimit_nofile: nofile) }
        writer.close
        [pid, reader]
      end
      @started = Soak.now
    end

    # nio4r is not in the Gemfile: under `bundle exec` the clients would not
    # find it, so they run outside the bundle.
    def unbundled(&)
      defined?(Bundler) ? Bundler.with_unbundled_env(&) : yield
    end

    def sample_until_clients_finish
      deadline = @started + @duration + 180
      finals = {}
      until finals.size == @clients
        raise "the clients did not finish in time" if Soak.now > deadline

        collect(finals, 1.0)
        sample
      end
      @final = finals.values.each_with_object(Hash.new(0)) do |stats, sum|
        stats.each { |key, value| sum[key] += value if value.is_a?(Numeric) && key != "t" }
      end
    end

    # Reads client lines for about +seconds+.
    def collect(finals, seconds)
      deadline = Soak.now + seconds
      while (left = deadline - Soak.now).positive?
        waiting = @client_pipes.map(&:last) - finals.keys
        break sleep(left) if waiting.empty?

        ready, = IO.select(waiting, nil, nil, left)
        (ready || []).each do |pipe|
          line = pipe.gets
          stats = line ? JSON.parse(line) : { "final" => true, "errors" => 1, "error client died" => 1 }
          @latest[pipe] = stats
          finals[pipe] = stats if stats["final"]
        end
      end
    end

    def sample
      totals = @latest.values.each_with_object(Hash.new(0)) do |stats, sum|
        stats.each { |key, value| sum[key] += value if value.is_a?(Numeric) }
      end
      row = { t: (Soak.now - @started).round, rss_mib: rss_kib / 1024.0, fds: fd_count, cpu: cpu_seconds,
              open: totals["open"], trips: totals["trips"], bytes: totals["bytes_in"],
              errors: totals["errors"] + totals["mismatches"] }
      previous = @samples.last
      @samples << row
      print_row(row, previous)
    end

    def header
      puts format("%5s %9s %7s %7s %7s %9s %9s %7s", "t(s)", "RSS(MiB)", "fds", "open", "cpu%", "trips/s", "MiB/s",
                  "errors")
    end

    def print_row(row, previous)
      dt = previous ? [row[:t] - previous[:t], 1].max : 1
      rate = ->(key) { previous ? (row[key] - previous[key]) / dt.to_f : 0 }
      puts format("%5d %9.1f %7d %7d %7.0f %9.0f %9.1f %7d", row[:t], row[:rss_mib], row[:fds], row[:open],
                  rate.call(:cpu) * 100, rate.call(:trips), rate.call(:bytes) / 1_048_576.0, row[:errors])
      $stdout.flush
    end

    def finish
      deadline = Soak.now + 15 # the server closes its side of the last connections
      sleep 0.1 while fd_count > @idle_fds && Soak.now < deadline
      @after_fds = fd_count
      @after_rss = rss_kib
      Process.kill(:TERM, @server_pid)
      _, @server_status = Process.wait2(@server_pid)
      @server_pid = nil
      verdict
    end

    # The load phase's samples (every connection open), in thirds.
    def thirds
      loaded = @samples.select { |row| row[:open] == @connections }
      loaded = @samples if loaded.size < 6
      size = loaded.size / 3
      [loaded[0, size], loaded[size, size], loaded[(2 * size)..]]
    end

    def flat?(key)
      _, middle, last = thirds
      return [false, 0, 0] if middle.empty? || last.empty?

      middle_max = middle.map { |row| row[key] }.max
      last_max = last.map { |row| row[key] }.max
      [last_max <= middle_max * (1 + @tolerance), middle_max, last_max]
    end

    def verdict
      checks = []
      rss_ok, rss_mid, rss_last = flat?(:rss_mib)
      fds_ok, fds_mid, fds_last = flat?(:fds)
      checks << ["RSS flat after warm-up (last third max #{rss_last.round(1)} MiB vs middle #{rss_mid.round(1)} MiB, " \
                 "tolerance #{(@tolerance * 100).round} %)", rss_ok]
      checks << ["descriptors flat after warm-up (last third max #{fds_last} vs middle #{fds_mid})", fds_ok]
      checks << ["descriptors back to idle after the clients closed (#{@after_fds} vs #{@idle_fds})",
                 @after_fds <= @idle_fds]
      checks << ["no client errors, no wrong bytes (#{@final["errors"]} errors, #{@final["mismatches"]} mismatches)",
                 @final["errors"].zero? && @final["mismatches"].zero?]
      checks << ["every message echoed completely (#{@final["incomplete"]} incomplete)", @final["incomplete"].zero?]
      checks << ["server exited 0 on SIGTERM (#{@server_status.inspect})", @server_status&.exitstatus&.zero?]
      summary
      checks.each { |text, ok| puts "#{ok ? "PASS" : "FAIL"}  #{text}" }
      @passed = checks.all?(&:last)
      puts "verdict: #{@passed ? "PASS" : "FAIL"}"
      @passed
    end

    def summary
      errors = @final.select { |key, _| key.start_with?("error ") }
      puts format("total: %<trips>d round trips, %<mib>.1f MiB echoed and verified; idle server %<rss>.1f MiB, " \
                  "%<fds>d fds; after the clients closed %<after>.1f MiB", trips: @final["trips"],
                                                                           mib: @final["bytes_in"] / 1_048_576.0,
                                                                           rss: @idle_rss / 1024.0, fds: @idle_fds,
                                                                           after: @after_rss / 1024.0)
      puts "client errors: #{errors}" unless errors.empty?
    end

    def stop_everything
      ([@server_pid] + (@client_pipes || []).map(&:first)).compact.each do |pid|
        Process.kill(:KILL, pid)
        Process.wait(pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
    end

    def rss_kib
      File.read("/proc/#{@server_pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i
    end

    def fd_count
      Dir.children("/proc/#{@server_pid}/fd").size
    end

    def cpu_seconds
      fields = File.read("/proc/#{@server_pid}/stat").split(") ").last.split
      (fields[11].to_i + fields[12].to_i) / Etc.sysconf(Etc::SC_CLK_TCK).to_f
    end

    public

    def passed?
      @passed
    end
  end
end

if ARGV.first == "--client"
  port, count, duration, min_size, max_size, seed = ARGV[1..]
  Soak::Client.new(port: Integer(port), count: Integer(count), duration: Float(duration),
                   min_size: Integer(min_size), max_size: Integer(max_size), seed: Integer(seed)).run
else
  driver = Soak::Driver.new
  driver.run
  exit(driver.passed? ? 0 : 1)
end
# rubocop:enable Style/FormatStringToken, Metrics/AbcSize
