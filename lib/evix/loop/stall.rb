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
    # The events of Loop#wait_of's bits.
    WAIT_EVENTS = { READ => :read, WRITE => :write, (READ | WRITE) => :read_write }.freeze
    private_constant :WAIT_EVENTS

    # What a parked task waits on. +kind+ is :io (+fd+ ready for +events+:
    # :read, :write or :read_write), :timer (a timeout and nothing else: a
    # sleep, or a wait for another fiber that has a timeout) or :suspend (for
    # another fiber to resume it: a Queue, Task#wait, a Condition...).
    # +timeout+ is the seconds left before the wait times out, or nil.
    Wait = Struct.new(:kind, :fd, :events, :timeout, keyword_init: true) do
      # What +fiber+ waits on in +loop+ (Loop#tasks).
      # @api private
      # @param loop [Evix::Loop]
      # @param fiber [Fiber, nil] nil for a task that has not started
      # @return [Wait, nil] nil unless +fiber+ is parked on +loop+
      def self.of(loop, fiber)
        wait = fiber && loop.wait_of(fiber)
        return nil unless wait

        fd, bits, left = wait
        kind = if fd
                 :io
               else
                 left ? :timer : :suspend
               end
        new(kind: kind, fd: fd, events: WAIT_EVENTS[bits], timeout: left)
      end

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

    # Loop#on_stall makes it, on the loop's thread.
    # @api private
    # @param loop [Evix::Loop] the loop to watch (kept only through its
    #   Evix::StallProbe, which holds its pulse, not the loop)
    # @param threshold [Numeric] milliseconds
    def initialize(loop, threshold, &block)
      probe = @probe = StallProbe.new(loop, threshold / 1000.0)
      @threshold = threshold
      @block = block
      @cancelled = false
      # The thread holds the probe and this watch only weakly, never the
      # loop: the block may hold the loop, and an abandoned loop must still
      # be collected (its probe then ends the thread).
      watches = ObjectSpace::WeakMap.new
      watches[probe] = self
      @thread = StallWatch.start(probe, watches, Thread.current)
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
end
