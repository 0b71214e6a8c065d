# frozen_string_literal: true

require "socket"
require_relative "address"
require_relative "listener"

module Evix
  # A server on several cores: the parent opens one listening socket, then
  # forks +count+ workers that inherit it, each serving it from its own
  # Evix::Loop (the kernel hands every connection to one of them). The
  # parent runs no loop: it supervises, woken by a self-pipe for signals
  # and by each new worker's "ready" pipe.
  #
  # - A worker that dies is replaced; one that dies young makes the next
  #   start wait (0.1 s, doubling up to 5 s), so a crash loop does not spin.
  # - SIGTERM or SIGINT: every worker drains (its server's
  #   +shutdown(timeout:)+), all against one deadline, +timeout+ +
  #   KILL_GRACE seconds after the signal; what still runs then is killed.
  # - SIGHUP: workers are replaced one at a time; each new one is ready
  #   before the old one drains.
  #
  # Because the listener is one socket, opened once and held by the parent,
  # a worker that stops accepting leaves what is queued to the others, and
  # a connection is never refused while the parent lives.
  class Workers
    # Seconds past +timeout+ that the parent waits before SIGKILL.
    KILL_GRACE = 1.0
    # Seconds before replacing the first worker that died young; doubles.
    RESTART_BACKOFF = 0.1
    # The longest wait before a replacement.
    MAX_RESTART_BACKOFF = 5.0
    # A worker that lived this many seconds did not die young.
    STABLE_AFTER = 5.0
    # The signals the parent handles while #run runs.
    SIGNALS = %i[TERM INT HUP QUIT CHLD].freeze

    # A forked worker, as the parent sees it. +replaces+: the pid it takes
    # over from once ready (rolling restart); +retire_at+: when it is
    # killed if still running (set once it was asked to drain).
    Worker = Struct.new(:pid, :generation, :started_at, :ready_pipe, :ready, :replaces, :retire_at, :killed)

    # @return [Addrinfo] the listener's address
    attr_reader :local_address

    # Opens the listener (so a port in use fails here); forks nothing yet.
    # @param host [String, nil] address to bind, as Evix::TCPServer takes it
    #   (nil: every address, IPv4 and IPv6)
    # @param port [Integer] port (0 picks a free one, see #port)
    # @param count [Integer] how many workers (> 0)
    # @param timeout [Numeric] seconds each worker's connections get to
    #   finish when it drains (finite, not negative)
    # @param backlog [Integer] listen(2) backlog, shared by every worker
    # @yieldparam loop [Evix::Loop] the worker's own loop
    # @yieldparam listener [Socket] the shared listener
    # @yieldreturn [#shutdown] what the worker drains on SIGTERM (an
    #   Evix::TCPServer on +listener+; anything with +shutdown(timeout:)+)
    # @raise [ArgumentError, TypeError] for bad arguments or no block
    def initialize(host, port, count:, timeout: 5, backlog: 1024, &setup)
      raise ArgumentError, "Evix::Workers.new requires a block (it sets up each worker's server)" unless setup
      raise TypeError, "count must be an Integer (got #{count.inspect})" unless count.is_a?(Integer)
      raise ArgumentError, "count must be positive (got #{count})" unless count.positive?

      @timeout = Arguments.seconds(timeout, "timeout")
      @count = count
      @setup = setup
      @listener = Net::Listener.open_tcp(Net::Address.check_host(host), Net::Address.check_port(port),
                                         backlog: Net::Listener.check_backlog(backlog))
      @local_address = @listener.local_address
      @workers = {} # pid => Worker: the one record of every live child
    end

    # @return [Integer] the bound port
    def port
      @local_address.ip_port
    end

    # Forks the workers and supervises them until SIGTERM or SIGINT has
    # drained them all. Blocks; owns the process's TERM, INT, HUP, QUIT and CHLD
    # traps meanwhile (they are restored after). Runs once, outside Evix.run.
    # @return [Boolean] true if every worker finished its drain in time and
    #   exited 0; false if one had to be killed at the deadline, or failed at
    #   any time (its setup block raised, it crashed and was replaced)
    # @raise [Evix::Error] when called twice or inside Evix.run
    def run
      raise Error, "Evix::Workers#run runs once" if @parent
      raise Error, "Evix::Workers#run must be called outside Evix.run" unless Fiber.current.blocking?

      @parent = Process.pid
      begin
        start_supervising
        supervise
      ensure
        stop_supervising # a worker never gets here: it leaves with exit!
      end
    end

    private

    # --- the parent ---------------------------------------------------------

    def start_supervising
      @signals, @signal_writer = ::IO.pipe
      # Every worker watches this pipe's read end: end of file means the
      # parent is gone (even by SIGKILL), and the worker drains.
      @lifeline, @lifeline_writer = ::IO.pipe
      @generation = 0
      @next_start = clock
      @young_deaths = 0
      @draining = false
      @clean = true
      @previous_traps = SIGNALS.to_h { |signal| [signal, Signal.trap(signal) { |signo| signalled(signo) }] }
    end

    # One pass per event: signals, exits, readiness, then what to start or
    # kill; then wait for the next event or deadline.
    def supervise
      loop do
        handle_signals
        reap
        note_ready
        return @clean if @draining && @workers.empty?

        kill_overdue
        unless @draining
          fill
          roll
        end
        wait_for_event
      end
    end

    # The trap: the parent only writes the signal's byte to its self-pipe. A
    # worker inherits this trap until its loop installs its own: a stop
    # that arrives meanwhile is remembered.
    def signalled(signo)
      if Process.pid == @parent
        @signal_writer.write_nonblock(signo.chr, exception: false)
      elsif [Signal.list["TERM"], Signal.list["INT"]].include?(signo)
        @stop_requested = true
      end
    end

    def handle_signals
      bytes = @signals.read_nonblock(256, exception: false)
      return unless bytes.is_a?(String)

      bytes.each_byte do |signo|
        case Signal.signame(signo)
        when "TERM", "INT" then drain
        when "HUP" then @generation += 1 unless @draining
        when "QUIT" then @workers.each_value { |worker| signal(worker, :QUIT) } # each prints its tasks
        end
      end
    end

    # One deadline for all: every worker is asked to drain now.
    def drain
      return if @draining

      @draining = true
      deadline = clock + @timeout + KILL_GRACE
      @workers.each_value { |worker| retire(worker, deadline) }
    end

    def retire(worker, deadline)
      signal(worker, :TERM) unless worker.retire_at
      worker.retire_at = [worker.retire_at, deadline].compact.min
    end

    def reap
      @workers.dup.each_value do |worker| # a copy: #exited deletes
        _, status = Process.wait2(worker.pid, Process::WNOHANG)
        exited(worker, status) if status
      rescue Errno::ECHILD # reaped by someone else: gone all the same
        exited(worker, nil)
      end
    end

    def exited(worker, status)
      @workers.delete(worker.pid)
      worker.ready_pipe.close unless worker.ready_pipe.closed?
      # Its successor in a rolling restart now simply takes its place.
      @workers.each_value { |other| other.replaces = nil if other.replaces == worker.pid }
      return died(worker, status) unless @draining || worker.retire_at
      return if status&.success?

      @clean = false if @draining
      warn "evix workers: worker #{worker.pid} #{describe(status)} while draining"
    end

    # An unexpected exit: replace it, later if it died young. A failed one
    # (its setup block raised, it crashed) makes #run report failure.
    def died(worker, status)
      @clean = false unless status&.success?
      age = clock - worker.started_at
      @young_deaths = age < STABLE_AFTER ? @young_deaths + 1 : 0
      delay = @young_deaths.zero? ? 0 : [RESTART_BACKOFF * (2**(@young_deaths - 1)), MAX_RESTART_BACKOFF].min
      @next_start = [@next_start, clock + delay].max
      warn format("evix workers: worker %<pid>d %<how>s after %<age>.1fs; starting another in %<delay>.1fs",
                  pid: worker.pid, how: describe(status), age: age, delay: delay)
    end

    def note_ready
      @workers.each_value do |worker|
        next if worker.ready || worker.ready_pipe.closed?

        byte = worker.ready_pipe.read_nonblock(1, exception: false)
        next if byte == :wait_readable

        worker.ready_pipe.close # a byte: ready; end of file: it exits, #reap will see
        next unless byte

        worker.ready = true
        took_over(worker) if worker.replaces
      end
    end

    # A rolling restart's new worker is ready: the old one drains.
    def took_over(worker)
      old = @workers[worker.replaces]
      worker.replaces = nil
      return unless old

      warn "evix workers: worker #{worker.pid} is ready; draining worker #{old.pid}"
      retire(old, clock + @timeout + KILL_GRACE)
    end

    def kill_overdue
      @workers.each_value do |worker|
        next if worker.killed || worker.retire_at.nil? || clock < worker.retire_at

        warn "evix workers: killed worker #{worker.pid} (SIGKILL): still running at the drain deadline"
        signal(worker, :KILL)
        worker.killed = true
        @clean = false if @draining
      end
    end

    # Starts workers until +count+ serve (a rolling restart's successor
    # does not count until it took over).
    def fill
      serving = @workers.each_value.count { |worker| worker.retire_at.nil? && worker.replaces.nil? }
      (@count - serving).times { start_worker if clock >= @next_start }
    end

    # SIGHUP made every older worker stale: replace one at a time.
    def roll
      return if clock < @next_start || @workers.each_value.any?(&:replaces)

      stale = @workers.each_value.find { |worker| worker.retire_at.nil? && worker.generation < @generation }
      start_worker(replaces: stale.pid) if stale
    end

    def start_worker(replaces: nil)
      ready_pipe, ready_writer = ::IO.pipe
      pid = fork { work(ready_writer) }
      @workers[pid] = Worker.new(pid, @generation, clock, ready_pipe, false, replaces)
    rescue SystemCallError => e # fork failed (EAGAIN, ENOMEM): try again later
      ready_pipe.close
      @next_start = clock + MAX_RESTART_BACKOFF
      warn "evix workers: cannot fork a worker (#{e.message}); trying again in #{MAX_RESTART_BACKOFF}s"
    ensure
      ready_writer&.close
    end

    # Sleeps until a signal, a new worker's readiness, or the next deadline.
    def wait_for_event
      pipes = @workers.each_value.filter_map { |worker| worker.ready_pipe unless worker.ready_pipe.closed? }
      deadlines = @workers.each_value.filter_map { |worker| worker.retire_at unless worker.killed }
      deadlines << @next_start unless @draining
      deadlines.select! { |time| time > clock }
      ::IO.select([@signals, *pipes], nil, nil, deadlines.empty? ? nil : [deadlines.min - clock, 0].max)
    end

    def signal(worker, name)
      Process.kill(name, worker.pid)
    rescue Errno::ESRCH
      nil # exited already; #reap will see
    end

    def describe(status)
      return "is gone" unless status
      return "was killed by SIG#{Signal.signame(status.termsig)}" if status.signaled?

      "exited with status #{status.exitstatus}"
    end

    # Also on an exception: no worker outlives #run.
    def stop_supervising
      @workers.each_value { |worker| signal(worker, :KILL) }
      @workers.each_key { |pid| reap_killed(pid) }
      @workers.clear
      @previous_traps&.each { |signal, handler| Signal.trap(signal, handler || "DEFAULT") }
      [@signals, @signal_writer, @lifeline, @lifeline_writer, @listener].each { |io| io&.close }
    end

    def reap_killed(pid)
      Process.wait(pid)
    rescue Errno::ECHILD
      nil
    end

    def clock
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # --- in a forked worker ---------------------------------------------------

    # Never returns: the worker exits 0 after its drain, 1 if it failed.
    def work(ready)
      status = 1
      leave_parent
      status = WorkerLoop.new(@listener, @lifeline, @timeout).run(ready, @setup) { @stop_requested }
    rescue SystemExit => e
      status = e.status
    rescue Exception => e # rubocop:disable Lint/RescueException -- the worker's last word
      warn "evix workers: worker #{Process.pid} failed: #{e.class}: #{e.message}",
           *e.backtrace&.first(5)&.map { |line| "  #{line}" }
    ensure
      $stdout.flush
      $stderr.flush
      exit!(status)
    end

    # Closes what the child inherited that is the parent's alone.
    def leave_parent
      [@signals, @signal_writer, @lifeline_writer].each(&:close)
      @workers.each_value { |worker| worker.ready_pipe.close unless worker.ready_pipe.closed? }
      @workers = {}
      # TERM and INT keep #signalled until the worker's loop installs its own.
      %i[HUP CHLD].each { |signal| Signal.trap(signal, @previous_traps[signal] || "DEFAULT") }
    end
  end

  class Workers
    # What a worker process runs: its own loop serving the shared listener,
    # until SIGTERM, SIGINT or the parent's death has drained it.
    class WorkerLoop
      # @param listener [Socket] the shared listener
      # @param lifeline [::IO] a pipe's read end: end of file when the parent is gone
      # @param timeout [Numeric] seconds the server's connections get when it drains
      def initialize(listener, lifeline, timeout)
        @listener = listener
        @lifeline = lifeline
        @timeout = timeout
        @stopping = false
      end

      # Sets up the server (the Evix::Workers block), writes a byte to
      # +ready+ and runs the loop until the drain is over.
      # @param ready [::IO] a pipe's write end: the parent waits for the byte
      # @param setup [Proc] the Evix::Workers block
      # @yieldreturn [Boolean] whether a stop signal came before the loop's
      #   own handlers were installed
      # @return [Integer] the exit status, 0
      def run(ready, setup)
        @loop = Loop.new
        @server = setup.call(@loop, @listener)
        unless @server.respond_to?(:shutdown)
          raise TypeError, "the Evix::Workers block must return the worker's server (an Evix::TCPServer), " \
                           "got #{@server.inspect}"
        end

        watch_for_stop
        stop if yield
        ready.write(".")
        ready.close
        @loop.run
        0
      ensure
        @loop&.close
      end

      private

      def watch_for_stop
        %i[TERM INT].each { |signal| @loop.add_signal(signal) { stop } }
        @orphaned = @loop.add_io(@lifeline, READ) { stop }
      end

      # Drains the server once, then ends the loop.
      def stop
        return if @stopping

        @stopping = true
        @orphaned.cancel # level-triggered: end of file would fire again and again
        @loop.spawn do
          @server.shutdown(timeout: @timeout)
          @loop.stop
        end
      end
    end
  end
end
