# frozen_string_literal: true

module Evix
  # What Loop#on_stall hands its block when one callback or fiber has held
  # the loop longer than the threshold.
  #
  # - +duration+: seconds the loop had been held when the backtrace was taken
  #   (within an eighth of the threshold: the watchdog looks that often)
  # - +task+: the Evix::Task whose fiber holds the loop, or nil for a plain
  #   callback (next_tick, add_timer, add_io...)
  # - +backtrace+: the loop thread's backtrace at that moment (Array of
  #   String), or nil if the stall ended before the watchdog could look:
  #   C code that keeps the GVL for the whole stall
  StallReport = Struct.new(:duration, :task, :backtrace, keyword_init: true) do
    # The report as evix prints it: one line, then the backtrace.
    # @return [String]
    def to_s
      where = task ? task.inspect : "a callback"
      lines = ["evix: loop stalled for #{(duration * 1000).round} ms in #{where}"]
      return lines.push("\t(it ended before its backtrace could be taken)").join("\n") unless backtrace

      lines.concat(backtrace.map { |line| "\tfrom #{line}" }).join("\n")
    end
  end

  # One live task of a loop, as Loop#tasks lists it: the Evix::Task, its
  # state (see Task#state), what it waits on (a Wait, or nil while it runs or
  # has not started) and its age in seconds.
  TaskInfo = Struct.new(:task, :state, :waiting, :age, keyword_init: true) do
    # One line: the task, its age, what it waits on.
    # @return [String]
    def to_s
      doing = if waiting
                "waits for #{waiting}"
              else
                state == :pending ? "not started" : "running"
              end
      "#{task.inspect} age #{format("%.2f", age)}s: #{doing}"
    end
  end

  class TaskInfo
    # What a parked task waits on. +kind+ is :io (+fd+ ready for +events+:
    # :read, :write or :read_write), :timer (a timeout and nothing else: a
    # sleep, or a wait for another fiber that has a timeout) or :suspend (for
    # another fiber to resume it: a Queue, Task#wait, a Condition...).
    # +timeout+ is the seconds left before the wait times out, or nil.
    Wait = Struct.new(:kind, :fd, :events, :timeout, keyword_init: true) do
      # @return [String] e.g. "fd 9 (read)", "a timer (4.95s left)"
      def to_s
        left = timeout && "#{format("%.2f", timeout)}s left"
        case kind
        when :io then "fd #{fd} (#{[events, left].compact.join(", ")})"
        when :timer then "a timer (#{left})"
        else ["another fiber to resume it", left && "(#{left})"].compact.join(" ")
        end
      end
    end
  end

  # The watchdog Loop#on_stall starts: a thread that watches the loop's
  # pulse without holding the GVL, and when one callback or fiber has held
  # the loop past the threshold, takes the loop thread's backtrace and calls
  # the block with a StallReport, once per stall. The block runs on the
  # watchdog thread while the loop is still stuck: it must be thread-safe
  # and short (the loop thread waits for the GVL meanwhile).
  class StallWatch
    # @return [Numeric] the threshold, in milliseconds
    attr_reader :threshold

    # Loop#on_stall makes it.
    # @api private
    # @param probe [Evix::StallProbe] the loop's pulse
    # @param threshold [Numeric] milliseconds
    # @param loop_thread [Thread] the thread that runs the loop
    def initialize(probe, threshold, loop_thread, &block)
      @probe = probe
      @threshold = threshold
      @block = block
      @cancelled = false
      # The thread holds the probe and this watch only weakly, never the
      # loop: the block may hold the loop, and an abandoned loop must still
      # be collected (its probe then ends the thread).
      watches = ObjectSpace::WeakMap.new
      watches[probe] = self
      @thread = StallWatch.start(probe, watches, loop_thread)
      # Until it waits in the probe: a new thread first needs the GVL, which
      # a loop stalled from the start would keep from it.
      Thread.pass until @thread.stop?
    end

    # Stops the watchdog: no report is delivered after this returns (one
    # under way when it is called finishes first). Idempotent; safe from
    # any thread, the block included.
    # @return [nil]
    def cancel
      @cancelled = true
      @probe.stop
      @thread.join unless Thread.current.equal?(@thread)
      nil
    end

    # @return [Boolean] whether the watchdog still watches (false after
    #   #cancel, once the loop is closed, and in a forked child)
    def active?
      !@cancelled && @thread.alive?
    end

    # The watchdog thread: built here, so that it holds nothing of a watch
    # but +watches+ (a WeakMap from +probe+ to it).
    # @api private
    # @return [Thread]
    def self.start(probe, watches, loop_thread)
      thread = Thread.new { watch(probe, watches, loop_thread) }
      thread.name = "evix stall watchdog"
      thread
    end

    # Calls the block with +report+ (the watchdog thread does).
    # @api private
    # @param report [StallReport]
    # @return [void]
    def report(report)
      return if @cancelled

      @block.call(report)
    rescue StandardError => e
      warn "evix: the on_stall block raised #{e.class}: #{e.message}"
    end

    # Until the probe ends: one report per stall, while the watch lives.
    def self.watch(probe, watches, loop_thread)
      last = nil
      while (stall = probe.wait(last))
        last, duration = stall
        watch = watches[probe] or break
        # Thread#[] and #backtrace of another thread read its running fiber.
        task = loop_thread[:evix_task]
        backtrace = loop_thread.backtrace
        # The loop moved on before this thread got the GVL (C code kept it
        # for the whole stall): what it shows now is not the stall.
        task = backtrace = nil unless probe.state == last
        watch.report(StallReport.new(duration: duration, task: task, backtrace: backtrace))
        watch = task = nil # the next wait holds no reference to the watch or the task
      end
    end
    private_class_method :watch
  end

  # Loop#on_stall, #tasks and #print_tasks.
  class Loop
    # The largest threshold #on_stall takes, in milliseconds (a day).
    MAX_STALL_MS = 86_400_000
    # The smallest, in milliseconds: a nanosecond, the watchdog's resolution.
    MIN_STALL_MS = 1e-6

    # The events of Loop#wait_of's bits.
    WAIT_EVENTS = { READ => :read, WRITE => :write, (READ | WRITE) => :read_write }.freeze
    private_constant :WAIT_EVENTS

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
        raise ArgumentError, "on_stall takes a positive number of milliseconds, at most #{MAX_STALL_MS} " \
                             "and at least #{MIN_STALL_MS} (a nanosecond) " \
                             "(got #{milliseconds.inspect})"
      end
      raise ArgumentError, "on_stall requires a block" if milliseconds && !block

      @stall_watch&.cancel
      @stall_watch = milliseconds && StallWatch.new(stall_probe(milliseconds / 1000.0), milliseconds,
                                                    Thread.current, &block)
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

      raise ArgumentError, "EVIX_STALL_MS must be a positive number of milliseconds, at most #{MAX_STALL_MS} " \
                           "and at least #{MIN_STALL_MS} (a nanosecond) " \
                           "(got #{value.inspect})"
    end

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
        TaskInfo.new(task: task, state: task.state, waiting: waiting_of(task), age: age)
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

    # Whether +milliseconds+ is a threshold #on_stall takes.
    # @api private
    # @return [Boolean]
    def self.stall_ms?(milliseconds)
      milliseconds.is_a?(Numeric) && milliseconds.real? && milliseconds >= MIN_STALL_MS && milliseconds <= MAX_STALL_MS
    end

    private

    def waiting_of(task)
      fiber = task.fiber # nil until the task starts
      wait = fiber && wait_of(fiber)
      return nil unless wait

      fd, bits, left = wait

      kind = if fd
               :io
             else
               left ? :timer : :suspend
             end
      TaskInfo::Wait.new(kind: kind, fd: fd, events: WAIT_EVENTS[bits], timeout: left)
    end
  end
end
