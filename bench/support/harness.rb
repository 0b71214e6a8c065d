# frozen_string_literal: true

require "English"
require "fileutils"
require "json"
require "rbconfig"
require "socket"
require "timeout"
require "tmpdir"

# The plumbing of bench/run.rb: child processes pinned to a core, what
# /proc says about them, the load generator, wrk and strace.
module Harness
  ROOT = File.expand_path("../..", __dir__)
  LOADGEN_DIR = File.join(ROOT, "bench", "loadgen")
  LOADGEN_TARGET = File.join(LOADGEN_DIR, "target", "release")
  SERVER_CPU = "0"
  CLIENT_CPU = "1"
  # Children get the soft descriptor limit raised to the hard one (raising the
  # hard limit needs CAP_SYS_RESOURCE, which even root may lack in a container).
  NOFILE = Process.getrlimit(:NOFILE).last
  READY_TIMEOUT = 60

  # Raised when a run cannot produce its figures; the row shows the message.
  class Failure < StandardError; end

  module_function

  # The environment children run in: no Bundler (the peers are Debian's gems,
  # which the project's bundle does not list), evix from this checkout.
  def child_env
    env = ENV.keys.grep(/\ABUNDLE|\ARUBYOPT\z|\ARUBYLIB\z|\AGEM_/).to_h { |key| [key, nil] }
    env.merge("RUBYLIB" => File.join(ROOT, "lib"))
  end

  def ruby_command(script, *args)
    [RbConfig.ruby, script, *args.map(&:to_s)]
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.local_address.ip_port
  ensure
    server&.close
  end

  # Builds the load generator and the ceiling server (cargo decides what is stale).
  def build_loadgen!
    cargo = ENV.fetch("CARGO", "cargo")
    ok = system(cargo, "build", "--release", "--locked", "--quiet",
                "--manifest-path", File.join(LOADGEN_DIR, "Cargo.toml"))
    raise Failure, "cargo build of bench/loadgen failed" unless ok
  end

  def loadgen
    File.join(LOADGEN_TARGET, "loadgen")
  end

  def ceiling
    File.join(LOADGEN_TARGET, "ceiling")
  end

  # --- /proc ------------------------------------------------------------------------------

  # @return [Hash{String=>Integer}] VmRSS, VmHWM… of +pid+ in KiB
  def memory(pid)
    File.foreach("/proc/#{pid}/status").each_with_object({}) do |line, memo|
      memo[Regexp.last_match(1)] = Integer(Regexp.last_match(2)) if line =~ /\A(Vm\w+):\s+(\d+) kB/
    end
  rescue Errno::ENOENT
    {}
  end

  # @return [Float] user + system CPU seconds of every thread of +pid+
  def cpu_seconds(pid)
    fields = File.read("/proc/#{pid}/stat").rpartition(")").last.split
    (Integer(fields[11]) + Integer(fields[12])) / clock_ticks.to_f
  end

  # +pid+ and its descendants (from each process's parent in /proc).
  def process_tree(pid)
    children = Hash.new { |hash, key| hash[key] = [] }
    Dir["/proc/[0-9]*/stat"].each do |path|
      fields = File.read(path).rpartition(")").last.split
      children[Integer(fields[1])] << Integer(path[%r{/proc/(\d+)/}, 1])
    rescue Errno::ENOENT, Errno::ESRCH
      next
    end
    tree = [pid]
    tree.each { |parent| tree.concat(children[parent]) }
    tree
  end

  def clock_ticks
    @clock_ticks ||= Integer(IO.popen(%w[getconf CLK_TCK], &:read).strip)
  rescue StandardError
    100
  end

  # --- processes --------------------------------------------------------------------------

  # A process pinned to one core with a high descriptor limit; stdout is a
  # pipe we read lines from, stderr a file kept for error messages.
  class Child
    attr_reader :pid, :stdout, :stdin

    # With +pgroup+ the child leads a process group of its own and #finish
    # signals the whole group (a server's forked workers too).
    def initialize(command, cpu:, stdin: false, env: Harness.child_env, pgroup: false)
      @log = File.join(Dir.tmpdir, "evix-bench-#{Process.pid}-#{object_id}.log")
      @stdout, out = IO.pipe
      @pgroup = pgroup
      options = { out: out, err: @log, rlimit_nofile: [NOFILE, NOFILE], chdir: ROOT, pgroup: pgroup }
      if stdin
        input, @stdin = IO.pipe
        options[:in] = input
      else
        options[:in] = File::NULL
      end
      @pid = Process.spawn(env, "taskset", "-c", cpu, *command, **options)
      out.close
      input&.close
    end

    # Reads stdout until a line matches +pattern+; the line, or Failure.
    def expect(pattern, timeout)
      Timeout.timeout(timeout) do
        while (line = @stdout.gets)
          return line if line.match?(pattern)
        end
      end
      raise Failure, "exited before printing #{pattern.inspect}: #{errors}"
    rescue Timeout::Error
      raise Failure, "no #{pattern.inspect} within #{timeout}s: #{errors}"
    end

    def puts(line)
      @stdin.puts(line)
      @stdin.flush
    rescue Errno::EPIPE, IOError
      nil
    end

    # Waits for the exit; TERM then KILL after +grace+ seconds when +stop+.
    # @return [Process::Status]
    def finish(stop: true, grace: 3)
      @stdin&.close unless @stdin&.closed?
      Process.kill(:TERM, target) if stop
      status = wait(grace)
      unless status
        Process.kill(:KILL, target)
        status = wait(grace)
      end
      status
    rescue Errno::ESRCH
      wait(grace)
    ensure
      @stdout.close unless @stdout.closed?
      kill_group
    end

    # Whether the process is still running (not exited, or exited and not reaped).
    def alive?
      return false if @status

      _, @status = Process.wait2(@pid, Process::WNOHANG)
      @status.nil?
    rescue Errno::ECHILD
      false
    end

    # The telling line of stderr: a Ruby crash report or exception if there
    # is one, else the last lines.
    def errors
      lines = File.exist?(@log) ? File.readlines(@log, chomp: true).reject(&:empty?) : []
      return "(no stderr)" if lines.empty?

      lines.find { |l| l.include?("[BUG]") } || lines.find { |l| l.match?(/\(\w+(::\w+)*(Error|Exception)\)\z/) } ||
        lines.last(3).join(" / ")
    end

    def cleanup
      FileUtils.rm_f(@log)
    end

    # Waits until stderr has a line matching +pattern+.
    def wait_log(pattern, timeout)
      deadline = Harness.now + timeout
      until File.exist?(@log) && File.read(@log).match?(pattern)
        raise Failure, "no #{pattern.inspect} on stderr within #{timeout}s: #{errors}" if Harness.now > deadline

        sleep 0.02
      end
    end

    private

    def target
      @pgroup ? -@pid : @pid
    end

    # What the group's leader left behind (a worker that ignored TERM) goes too.
    def kill_group
      Process.kill(:KILL, -@pid) if @pgroup
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end

    def wait(seconds)
      return @status if @status

      deadline = Harness.now + seconds
      loop do
        _, status = Process.wait2(@pid, Process::WNOHANG)
        return @status = status if status
        return nil if Harness.now > deadline

        sleep 0.02
      end
    rescue Errno::ECHILD
      $CHILD_STATUS
    end
  end

  # A benchmark server started in +mode+ on a free port, ready to serve.
  class ServerRun
    attr_reader :port, :child

    def initialize(command_for_port)
      @port = Harness.free_port
      @child = Child.new(command_for_port.call(@port), cpu: SERVER_CPU)
      @child.expect(/\Aready\b/, READY_TIMEOUT)
    rescue Failure
      @child&.finish
      raise
    end

    def pid
      @child.pid
    end

    def memory
      Harness.memory(pid)
    end

    # TERM, then KILL a second later: the figures are taken, and a server
    # that ignores TERM must not stall the run.
    def stop
      @child.finish(grace: 1)
      @child.cleanup
    end

    def self.with(command_for_port)
      run = new(command_for_port)
      yield run
    ensure
      run&.stop
    end
  end

  # --- clients ----------------------------------------------------------------------------

  # Runs the load generator to completion; its JSON result.
  def run_loadgen(args, timeout:)
    child = Child.new([loadgen, *args.map(&:to_s)], cpu: CLIENT_CPU)
    line = child.expect(/\A\{/, timeout)
    status = child.finish(stop: false, grace: 30)
    result = JSON.parse(line)
    raise Failure, "loadgen: #{result["first_error"] || child.errors}" unless status&.success?

    result
  ensure
    child&.cleanup
  end

  # Runs wrk against +port+ and returns requests/s, latency percentiles (µs),
  # requests and errors.
  def run_wrk(port, connections:, seconds:, path: "/", timeout: 2)
    command = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c#{connections}", "-d#{seconds}s", "--latency",
               "--timeout", "#{timeout}s", "http://127.0.0.1:#{port}#{path}"]
    out = IO.popen(command, err: %i[child out], &:read)
    raise Failure, "wrk failed: #{out.lines.last}" unless $CHILD_STATUS.success?

    parse_wrk(out)
  end

  def parse_wrk(out)
    requests = out[/(\d+) requests in/, 1] or raise Failure, "wrk printed no request count: #{out}"
    errors = out.scan(/(?:connect|read|write|timeout) (\d+)/).flatten.sum(&:to_i)
    errors += out[/Non-2xx or 3xx responses: (\d+)/, 1].to_i
    { "requests" => Integer(requests), "rps" => Float(out[%r{Requests/sec:\s+([\d.]+)}, 1]),
      "p50_us" => wrk_micros(out[/^\s+50%\s+(\S+)/, 1]), "p99_us" => wrk_micros(out[/^\s+99%\s+(\S+)/, 1]),
      "errors" => errors }
  end

  def wrk_micros(text)
    return nil unless text

    value = Float(text[/[\d.]+/])
    case text[/[a-z]+\z/]
    when "us" then value
    when "ms" then value * 1000
    when "s" then value * 1_000_000
    else raise Failure, "wrk latency #{text.inspect}"
    end
  end

  # System calls counted one by one with perf's tracepoints; the rest is "other".
  PERF_SYSCALLS = %w[read write recvfrom sendto readv writev epoll_wait epoll_pwait epoll_pwait2 epoll_ctl poll
                     ppoll select pselect6 futex clock_gettime getpid brk mmap munmap madvise mprotect
                     rt_sigprocmask sched_yield].freeze
  TRACEFS = "/sys/kernel/tracing/events"

  # Whether `perf stat` can count system calls through tracepoints here. On
  # a fresh machine tracefs is not mounted until something asks for a
  # tracepoint: one throw-away `perf stat` on one does (as root).
  def perf_syscalls?
    return @perf_syscalls unless @perf_syscalls.nil?

    tracepoint = File.join(TRACEFS, "raw_syscalls", "sys_enter")
    unless File.directory?(tracepoint)
      system("perf", "stat", "-e", "raw_syscalls:sys_enter", "true", out: File::NULL, err: File::NULL)
    end
    @perf_syscalls = File.directory?(tracepoint) && system("perf", "--version", out: File::NULL)
  end

  # Counts the system calls of +pid+ (every thread) while +block+ runs, with
  # perf's syscall tracepoints: the kernel counts, the server is not slowed.
  # @return [Hash{String=>Integer}] calls by system call name, plus "other"
  def perf_syscall_counts(pid)
    names = PERF_SYSCALLS.select { |name| File.directory?(File.join(TRACEFS, "syscalls", "sys_enter_#{name}")) }
    events = ["raw_syscalls:sys_enter", *names.map { |name| "syscalls:sys_enter_#{name}" }]
    out = File.join(Dir.tmpdir, "evix-bench-perf-#{pid}.csv")
    counter = Child.new(["perf", "stat", "-x", ",", "-o", out, "-e", events.join(","), "-p", pid.to_s],
                        cpu: CLIENT_CPU, env: {})
    sleep 0.5 # perf prints nothing when it has attached; its setup takes a few ms
    yield
    Process.kill(:INT, counter.pid)
    counter.finish(stop: false, grace: 10)
    parse_perf(File.read(out))
  ensure
    counter&.cleanup
    FileUtils.rm_f(out) if out
  end

  # perf stat -x, lines: "count,unit,event,…".
  def parse_perf(text)
    counts = text.each_line.with_object({}) do |line, memo|
      count, _unit, event = line.split(",")
      memo[event.sub(/\A\w+:sys_enter_?/, "")] = Integer(count) if event&.include?("sys_enter") && count =~ /\A\d+\z/
    end
    total = counts.delete("") or raise Failure, "perf stat counted nothing: #{text.lines.last}"
    counts.reject! { |_, calls| calls.zero? }
    counts.merge("other" => total - counts.values.sum)
  end

  # Counts the system calls of +pid+ (every thread) while +block+ runs, with
  # strace: every call stops the server twice, which slows it far below the
  # client's pace.
  # @return [Hash{String=>Integer}] calls by system call name
  def strace_counts(pid)
    out = File.join(Dir.tmpdir, "evix-bench-strace-#{pid}.txt")
    tracer = Child.new(["strace", "-c", "-f", "-o", out, "-p", pid.to_s], cpu: CLIENT_CPU, env: {})
    tracer.wait_log(/attached/, 10)
    sleep 0.2 # the other threads' attach messages follow the first
    yield
    Process.kill(:INT, tracer.pid)
    tracer.finish(stop: false, grace: 10)
    parse_strace(File.read(out))
  ensure
    tracer&.cleanup
    FileUtils.rm_f(out) if out
  end

  # strace -c's table: "% time seconds usecs/call calls [errors] syscall".
  def parse_strace(text)
    text.each_line.with_object({}) do |line, counts|
      fields = line.split
      next unless fields.size >= 5 && fields[0].match?(/\A[\d.]+\z/) && fields[3].match?(/\A\d+\z/)

      counts[fields.last] = Integer(fields[3]) unless fields.last == "total"
    end
  end
end
