# frozen_string_literal: true

module Evix
  # Evix::Loop's Ruby half: fibers, IO wrappers, signals, offload and stall
  # reports. The rest is native (ext/evix/src/ruby/event_loop.rs); what it
  # needs from there it gets through public methods and small objects
  # (Evix::Hold, Evix::StallProbe), never a private native method.
  class Loop
    # The largest threshold #on_stall takes, in milliseconds (a day).
    MAX_STALL_MS = 86_400_000
    # The smallest, in milliseconds: a nanosecond, the watchdog's resolution.
    MIN_STALL_MS = 1e-6

    # Installs evix's patches to ::IO (see IOPatches) with the first loop.
    module Creating
      # @return [Evix::Loop]
      def new(...)
        IOPatches.install
        super
      end
    end
    singleton_class.prepend(Creating)

    # Runs the block in a new fiber driven by this loop.
    # @yieldreturn [Object] the task's value (Task#wait)
    # @return [Evix::Task]
    # @raise [ArgumentError] without a block
    def spawn(&block)
      raise ArgumentError, "spawn requires a block" unless block

      Task.new(self, &block)
    end

    # Wraps an IO for fiber-friendly, non-blocking use inside tasks (as
    # Evix::IO.new(self, io, ...)).
    # @param io [::IO, OpenSSL::SSL::SSLSocket] an open IO
    # @param timeout [Numeric, nil] default per-operation timeout in seconds
    # @param write_high_water [Integer] bytes Evix::IO#try_write may queue
    # @return [Evix::IO]
    # @raise (see Evix::IO#initialize)
    def wrap(io, timeout: nil, write_high_water: Evix::IO::WRITE_HIGH_WATER)
      Evix::IO.new(self, io, timeout: timeout, write_high_water: write_high_water)
    end

    # A scratch String that Evix::IO reads into before copying what arrived,
    # so a read allocates no buffer of its full size. One per loop: fibers of
    # a loop never read concurrently.
    # @api private
    # @return [String]
    def read_buffer
      @read_buffer ||= String.new(capacity: Evix::IO::CHUNK, encoding: Encoding::BINARY)
    end

    # Suspends the calling task for +seconds+.
    # @param seconds [Numeric] not negative
    # @return [nil]
    # @raise [Evix::Error] outside a task
    # @raise [ArgumentError, TypeError] a nil, negative or non-Numeric +seconds+
    def sleep(seconds)
      raise Error, "Evix::Loop#sleep must be called inside a task" unless Task.current
      raise ArgumentError, "seconds must not be nil" if seconds.nil?

      suspend(seconds)
      nil
    end

    # Runs the block on this loop, in a new task, whenever +signal+ arrives
    # (replacing this loop's earlier block for it). Other loops, on any
    # thread, may handle the same signal: each runs its own block.
    # @param signal [Symbol, String, Integer] :INT, "SIGINT", 2...
    # @yieldparam signo [Integer] the signal number
    # @return [Integer] the signal number
    # @raise [ArgumentError] an unknown signal, one Ruby reserves (SIGVTALRM...), no block
    # @raise [Errno::EINVAL] a signal that cannot be caught (SIGKILL, SIGSTOP)
    def add_signal(signal, &)
      ensure_usable!
      Signals.number(signal)
      raise ArgumentError, "add_signal requires a block" unless block_given?

      unless @signals
        @signals = Signals.new(self)
        reserve_fd(@signals.reader)
      end
      @signals.add(signal, &)
    end

    # Stops handling +signal+ on this loop. The last loop of the process to
    # stop handling it restores the handler that was there before evix.
    # The self-pipe stays open until #close: its read end is reserved as the
    # loop's own fd, which a new pipe could otherwise reuse.
    # @param signal [Symbol, String, Integer]
    # @return [Boolean] whether a handler was removed
    def remove_signal(signal)
      ensure_usable!
      return false unless @signals

      @signals.remove(signal)
    end

    # Whether a signal block of this loop may still run (its watcher is
    # unref'd, so #alive? does not count it): the nursery's deadlock check.
    # @api private
    # @return [Boolean]
    def handles_signals?
      !@signals.nil? && !@signals.empty?
    end

    # Runs the block on the offload pool (Evix.offload_pool) and returns its
    # value to the calling task (or fiber of an Evix::Scheduler) without
    # blocking the loop; the block's exception is raised in the caller.
    # While the job is out the loop stays alive: #run does not return for
    # want of anything to do.
    # @yieldreturn [Object] what the call returns
    # @return [Object] the block's value
    # @raise [ArgumentError] without a block
    # @raise [Evix::Error] outside a fiber the loop runs
    # @raise [Exception] the block's exception
    def offload(&block)
      raise ArgumentError, "offload requires a block" unless block
      raise Error, "Evix::Loop#offload must be called from a fiber the loop runs" if Fiber.current.blocking?

      outcome = token = nil
      hold = Hold.new(self)
      Evix.offload_pool.submit(self, block) do |value, error|
        outcome = [value, error]
        resume(token) if token
      end
      suspend { |t| token = t } until outcome
      raise outcome[1] if outcome[1]

      outcome[0]
    ensure
      hold&.release
    end

    # Calls the block with an Evix::StallReport whenever one callback or
    # fiber holds the loop longer than +milliseconds+: which task, and the
    # loop thread's backtrace at that moment, once per stall. A watchdog
    # thread does the watching (see Evix::StallWatch): the block runs on
    # that thread, so it must be thread-safe and short. One watchdog per
    # loop: a new call replaces the previous one; nil stops it. It also
    # stops when the loop is closed or collected, and does not keep the
    # process alive.
    # @param milliseconds [Numeric, nil] the threshold (a nanosecond <= ms <= a day)
    # @return [Evix::StallWatch, nil] the watchdog (nil for nil)
    # @raise [ArgumentError] for a bad threshold or a missing block
    def on_stall(milliseconds, &block)
      ensure_usable!
      unless milliseconds.nil? || Loop.stall_ms?(milliseconds)
        raise ArgumentError, "on_stall takes #{STALL_RANGE} (got #{milliseconds.inspect})"
      end
      raise ArgumentError, "on_stall requires a block" if milliseconds && !block

      @stall_watch&.cancel
      @stall_watch = milliseconds && StallWatch.new(self, milliseconds, &block)
    end

    # #on_stall with the threshold in ENV["EVIX_STALL_MS"] (unset or empty:
    # nothing), reporting on $stderr. Evix.run and `exe/evix` call it.
    # @return [Evix::StallWatch, nil]
    # @raise [ArgumentError] if EVIX_STALL_MS is not a valid threshold
    def on_stall_from_env
      milliseconds = Loop.stall_ms_from_env
      milliseconds && on_stall(milliseconds) { |report| warn(report.to_s) }
    end

    # The threshold in ENV["EVIX_STALL_MS"], in milliseconds; nil when it is
    # unset or empty.
    # @return [Float, nil]
    # @raise [ArgumentError] if it is not a valid threshold
    def self.stall_ms_from_env
      value = ENV.fetch("EVIX_STALL_MS", "").strip
      return nil if value.empty?

      milliseconds = Float(value, exception: false)
      return milliseconds if milliseconds && stall_ms?(milliseconds)

      raise ArgumentError, "EVIX_STALL_MS must be #{STALL_RANGE} (got #{value.inspect})"
    end

    # Whether +milliseconds+ is a threshold #on_stall takes.
    # @api private
    # @return [Boolean]
    def self.stall_ms?(milliseconds)
      milliseconds.is_a?(Numeric) && milliseconds.real? && milliseconds >= MIN_STALL_MS && milliseconds <= MAX_STALL_MS
    end

    STALL_RANGE = "a positive number of milliseconds, at most #{MAX_STALL_MS} " \
                  "and at least #{MIN_STALL_MS} (a nanosecond)".freeze
    private_constant :STALL_RANGE

    # The loop's live tasks (spawned, or scheduled by an Evix::Scheduler, and
    # not finished), oldest first. Found by a walk of the Ruby heap, so that
    # spawning a task costs no bookkeeping: a diagnostic, not for every request.
    # @return [Array<Evix::TaskInfo>]
    def tasks
      ensure_usable!
      live = ObjectSpace.each_object(Task).filter_map do |task|
        [task, task.age] if task.loop.equal?(self) && task.alive?
      end
      live.sort_by { |_task, age| -age }.map do |task, age|
        TaskInfo.new(task: task, state: task.state, waiting: TaskInfo::Wait.of(self, task.fiber), age: age)
      end
    end

    # Writes #tasks to +io+, a line each under a count (what `exe/evix`
    # servers print on SIGQUIT).
    # @param io [#write]
    # @return [nil]
    def print_tasks(io = $stderr)
      list = tasks
      header = "evix: #{list.size} live task#{"s" unless list.size == 1} (pid #{Process.pid})"
      io.write([header, *list.map { |info| "  #{info}" }].join("\n") << "\n")
      nil
    end

    # Closes the loop (see the native #close), then restores its signal
    # handlers and stops its stall watchdog.
    module Closing
      # @return [nil]
      def close
        super
        @signals&.close
        @signals = nil
        @stall_watch&.cancel
        @stall_watch = nil
      end
    end
    prepend Closing
  end
end
