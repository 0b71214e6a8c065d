# frozen_string_literal: true

module Evix
  # How evix shows where an exception came from: the user's frames first,
  # each run of evix's own frames folded into one line that says how many
  # there were (EVIX_BACKTRACE=full keeps them all). Used by the servers'
  # default Server#on_error and by Evix.run for what leaves it.
  module Backtrace
    # Where evix's Ruby files live, as __FILE__ spells it and with links
    # resolved: a frame in one of them is evix's own.
    ROOTS = [__dir__, File.realpath(__dir__)].uniq.map { |dir| "#{dir}/" }.freeze
    # The frame of a scheduler hook written in C (Evix::Scheduler), which
    # Ruby files under the caller's line.
    HOOK = /in [`'](Evix::Scheduler#)?(kernel_sleep|block|io_wait|io_read|io_write)'\z/
    # Frames Backtrace.report shows at most, after folding.
    REPORT_FRAMES = 12

    module_function

    # @param frame [String] one line of a backtrace
    # @return [Boolean] whether the frame is in evix's own Ruby code
    def evix?(frame)
      frame.start_with?(*ROOTS)
    end

    # +frames+ with each run of evix's frames folded into one line, except
    # the first frame, which is kept whoever's it is (where the exception was
    # raised). Unchanged when EVIX_BACKTRACE is "full".
    # @param frames [Array<String>, nil]
    # @return [Array<String>]
    def fold(frames)
      frames = Array(frames)
      return frames if ENV["EVIX_BACKTRACE"] == "full" || frames.empty?

      folded = [frames.first]
      frames.drop(1).chunk_while { |a, b| evix?(a) == evix?(b) }.each do |run|
        next folded.concat(run) unless evix?(run.first)

        folded << (run.size == 1 ? run.first : "... #{run.size} frames of evix")
      end
      folded
    end

    # The exception as one line (class and message) and its folded
    # backtrace, at most +frames+ lines of it: what Server#on_error prints
    # by default.
    # @param error [Exception]
    # @param frames [Integer] how many frames to show at most
    # @return [String]
    def report(error, frames: REPORT_FRAMES)
      lines = fold(error.backtrace)
      shown = lines.first(frames).map { |frame| "\tfrom #{frame}" }
      shown << "\t... #{lines.size - frames} more" if lines.size > frames
      ["#{error.class}: #{error.message}", *shown].join("\n")
    end

    # For an exception raised into the fiber that runs the loop (Interrupt,
    # a signal, Thread#raise): if it arrived while evix's own code ran (its
    # backtrace is evix's frames, then only the frames that called
    # Evix.run), it gets +waiting+, the frames where the run's block was
    # waiting (empty if the block had ended), in place of evix's: it is
    # reported where the program was, as Ruby reports it without a scheduler.
    # @api private
    # @param error [Exception]
    # @param waiting [Array<String>]
    # @return [Exception] +error+
    def arrived(error, waiting)
      frames = error.backtrace
      return error if frames.nil? || error.frozen? || !evix?(frames.first.to_s)

      callers = frames.drop_while { |frame| evix?(frame) }
      return error unless callers.none? { |frame| evix?(frame) } # a callback's own exception

      waiting = waiting.reject { |frame| evix?(frame) }.drop_while { |frame| frame.match?(HOOK) }
      error.set_backtrace(waiting + callers)
      error
    end

    # For an exception that leaves Evix.run: the frames of Evix.run's caller
    # (+outer+) go after its own unless they are there already, and evix's
    # frames are folded, so the report reads from the user's code down to
    # the call of Evix.run. Done once per exception.
    # @api private
    # @param error [Exception]
    # @param outer [Array<String>] the caller's frames, from Evix.run out
    # @return [Exception] +error+
    def for_run(error, outer)
      return error if error.frozen? || error.instance_variable_defined?(:@evix_backtrace)

      own = error.backtrace || []
      outer = outer.reject { |frame| evix?(frame) }
      own += outer unless own.last(outer.size) == outer
      error.set_backtrace(fold(own))
      error.instance_variable_set(:@evix_backtrace, true)
      error
    end
  end
end
