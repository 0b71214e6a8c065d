# frozen_string_literal: true

# The API reference of what the Rust extension defines (ext/evix/src/ruby/*.rs),
# for YARD: .yardopts lists this file after lib/ (so the class comments here win
# over lib/'s notes on reopening them), and Ruby never loads it. The gem ships it
# rendered for RDoc and ri (`rake doc:ri`, rakelib/ri_doc.rb: the YARD tags become
# RDoc lists). Each signature takes the arguments the native method accepts;
# `rake doc:native` checks them against the compiled extension.
# Evix, Arguments, Scheduler and IO are reopened without a comment: theirs are in lib/.
# rubocop:disable Style/Documentation

module Evix
  # Event bit: readable (Loop#add_io, Loop#wait_io, the bits a watcher's block gets).
  READ = 1
  # Event bit: writable.
  WRITE = 2
  # Event bit for Loop#add_io only: the watcher is removed before its block runs, once.
  ONESHOT = 4

  # The kernel backends this OS has, the default first (:epoll then :poll on
  # Linux; :kqueue then :poll on the BSDs and macOS).
  # @return [Array<Symbol>]
  def self.backends; end

  module Arguments
    # +value+ as given, if it is a number of seconds the loop can wait: a
    # real Numeric, finite, not negative and under 2**64 (what the loop's
    # own durations take). The error names the argument and shows the value.
    # @api private
    # @param value [Object] what the caller passed
    # @param name [String] the argument's name, for the error message
    # @return [Numeric] +value+
    # @raise [TypeError] not a Numeric
    # @raise [ArgumentError] not real, not finite, negative or too large
    def self.seconds(value, name); end
  end

  # An event loop with a Rust core: immediates, timers, IO watchers, deferred
  # callbacks and cross-thread wakeups, run as libuv's uv_run does, in named
  # phases (docs/architecture.md). Fibers park on it through #wait_io and
  # #suspend; the Ruby layer adds #spawn, #wrap, #sleep, signals and more.
  #
  # A loop belongs to the thread that made it: #post, #wakeup and
  # #closed? may be called from any thread (and a trap handler), every other
  # method raises Evix::Error there, and in a child after fork. Durations are
  # seconds (Integer, Float or Rational). Bad arguments raise at the call
  # (ArgumentError, TypeError), a closed loop raises Evix::ClosedError, an
  # exception in a callback propagates out of #run and #run_once.
  class Loop
    # A new loop on a kernel backend.
    # @param backend [Symbol, String, nil] one of Evix.backends; nil: the
    #   EVIX_BACKEND environment variable, else the first of Evix.backends
    # @return [Evix::Loop]
    # @raise [ArgumentError] a backend this OS does not have
    def self.new(backend: nil); end

    # Called by evix's IO#reopen hook (Evix::IOPatches) before every reopen in
    # the process: the fd registrations pinned to IO objects so far are checked
    # with the kernel on their next wait, as the IO may hold another file now.
    # @api private
    # @return [nil]
    def self.io_reopened; end

    # Called by evix's IO#close hook (Evix::IOPatches), from any thread, before
    # +io+ is closed: every loop that registered its fd ends the waits on it
    # (with Evix::ClosedError) on its next iteration.
    # @api private
    # @param io [::IO]
    # @return [nil]
    def self.io_closing(io); end

    # Queues the block to run in the next immediates phase (FIFO). A block
    # queued by an immediate runs on the next iteration, not this one.
    # @yield no arguments
    # @return [nil]
    def next_tick; end

    # Queues the block to run in the deferred phase, at the end of this
    # iteration: the place to release what other callbacks of the iteration
    # may still use.
    # @yield no arguments
    # @return [nil]
    def defer; end

    # Calls the block once after +delay+ seconds, then every +repeat+ seconds if
    # given (rescheduled before the block runs; missed periods are skipped).
    # @param delay [Numeric] seconds, >= 0
    # @param repeat [Numeric, nil] seconds between calls, > 0; nil: once
    # @yield no arguments
    # @return [Evix::Timer]
    def add_timer(delay, repeat: nil); end

    # Calls the block whenever +io+ is ready for +events+ (level-triggered;
    # with ONESHOT, once). Several watchers may watch one fd. The loop keeps an
    # IO object alive while watched, and never closes it.
    # @param io [::IO, #to_io, Integer] an IO or a file descriptor
    # @param events [Integer] READ and/or WRITE, optionally | ONESHOT
    # @yieldparam ready [Integer] the ready bits (an error or hang-up reports
    #   every interest the watcher has)
    # @return [Evix::Watcher]
    # @raise [Evix::ClosedError] +io+ is closed
    # @raise [SystemCallError] the kernel refuses the fd (Errno::EBADF...)
    def add_io(io, events); end

    # Parks the calling fiber until +io+ is ready for +events+. A wait costs
    # no syscall when the fd is already registered for this IO object.
    # @param io [::IO, #to_io, Integer]
    # @param events [Integer] READ and/or WRITE
    # @param timeout [Numeric, nil] seconds; nil: no limit
    # @return [Integer, nil] the ready bits, nil once +timeout+ passed
    # @raise [Evix::ClosedError] the IO is released or closed before or during the wait
    def wait_io(io, events, timeout = nil); end

    # Forgets +io+'s fd registration and removes its watchers, before it is
    # closed; the fibers waiting on it get Evix::ClosedError on the next tick.
    # @param io [::IO, #to_io, Integer]
    # @return [nil]
    def release_io(io); end

    # Parks the calling fiber until #resume ends the wait, or +timeout+ passes.
    # @param timeout [Numeric, nil] seconds; nil: no limit
    # @yieldparam token [Integer] the wait's token, for #resume, before the
    #   fiber switches away
    # @return [Object, nil] the value given to #resume, nil on timeout
    def suspend(timeout = nil); end

    # Ends the wait of +token+ (from #suspend's block) with +value+, once.
    # From the fiber running the loop the waiter runs now, from any other
    # fiber on the next tick.
    # @param token [Integer]
    # @param value [Object] what #suspend returns
    # @return [Boolean] false if that wait had already ended
    def resume(token, value = nil); end

    # Raises +exception+ in +fiber+ at its current wait on this loop, or at its
    # next one if it is running (Evix::Task#cancel uses it); in the calling
    # fiber, at once.
    # @param fiber [Fiber]
    # @param exception [Exception]
    # @return [nil]
    def interrupt(fiber, exception); end

    # Runs the new +fiber+ now, by transfer, so that it waits on this loop like
    # any task; returns when it first waits or ends. A caller that is itself a
    # fiber of the loop is parked meanwhile and resumed on the next tick.
    # @param fiber [Fiber] a fiber not started yet
    # @return [nil]
    # @raise [Evix::Error] +fiber+ is parked in a wait of this loop (a switch
    #   to it would end that wait early)
    def start(fiber); end

    # @return [Integer] how many fibers are parked on the loop
    def waiters; end

    # Queues the block to run on the loop's thread, in the next immediates
    # phase, and wakes the loop. Safe from any thread and from a trap handler.
    # @yield no arguments
    # @return [nil]
    # @raise [Evix::ClosedError] the loop is closed
    def post; end

    # Wakes the loop from its backend wait (wakeups coalesce). Safe from any
    # thread and from a trap handler; a no-op on a closed loop.
    # @return [nil]
    def wakeup; end

    # Runs the loop: :default until #stop or nothing referenced is left
    # (immediates, deferred work, referenced timers and watchers, parked
    # fibers); :once for one iteration that may block; :nowait for one that
    # does not. A #stop asked before returns at once, and is cleared on return.
    # @param mode [:default, :once, :nowait]
    # @return [nil]
    # @raise [Evix::Error] called from inside a run of this loop
    def run(mode = :default); end

    # One iteration, blocking at most +timeout+ seconds.
    # @param timeout [Numeric, nil] seconds; nil: as long as needed
    # @return [Boolean] whether referenced work remains (as #alive?)
    def run_once(timeout = nil); end

    # @return [Boolean] whether anything referenced is left to run or wait for
    def alive?; end

    # Makes #run return after the current iteration.
    # @return [nil]
    def stop; end

    # Closes the backend and drops every queued callback, timer, watcher and
    # wait; the user's IOs stay open. Idempotent.
    # @return [nil]
    # @raise [Evix::Error] inside #run: call #stop, then close after it returns
    def close; end

    # Safe from any thread.
    # @return [Boolean]
    def closed?; end

    # @return [Symbol] the kernel backend: :epoll, :kqueue or :poll
    def backend; end

    # Counters for tests and tuning.
    # @return [Hash{Symbol => Integer}] +:immediates+, +:deferred+, +:timers+,
    #   +:watchers+ and +:waiters+ now; +:iterations+ so far; +:rebuilds+: how
    #   often a stale registration (an fd closed while its file stays open
    #   elsewhere) made the loop rebuild its backend
    def stats; end

    # Marks +io+ (the signal pipe's read end) as the loop's own: #add_io,
    # #wait_io and #release_io refuse it. Public for Loop#add_signal.
    # @api private
    # @param io [::IO]
    # @return [nil]
    def reserve_fd(io); end

    # What +fiber+ is parked on (Loop#tasks).
    # @api private
    # @param fiber [Fiber]
    # @return [Array(Integer, Integer, Float), nil] fd, event bits and seconds
    #   left (each nil when the wait has none); nil if +fiber+ is not parked here
    def wait_of(fiber); end

    # The checks every native method makes (thread, fork, closed), for the
    # methods written in Ruby.
    # @api private
    # @return [nil]
    def ensure_usable!; end
  end

  # Keeps a loop's #run going, as a referenced timer would, until released:
  # Loop#offload holds its loop while the job is out.
  # @api private
  class Hold
    # Holds +loop+ from now on.
    # @param loop [Evix::Loop]
    # @raise [TypeError] +loop+ is not an Evix::Loop
    # @return [Evix::Hold]
    # @raise [Evix::ClosedError] the loop is closed
    def self.new(loop); end

    # Ends the hold; quiet on a closed loop (it is called from ensure).
    # @return [Boolean] false if it had ended already or the loop is closed
    def release; end
  end

  # The handle Loop#add_timer returns (there is no Timer.new). On a closed
  # loop #cancel, #active? and #ref? still answer; #again, #ref and #unref
  # raise Evix::ClosedError.
  class Timer
    # Stops the timer; idempotent. #again re-arms it.
    # @return [nil]
    def cancel; end

    # @return [Boolean] whether the timer will fire (false once a one-shot
    #   timer fired, or after #cancel)
    def active?; end

    # Re-arms the timer +delay+ seconds from now, keeping its block and
    # repeat: a pending timer moves, a fired or cancelled one is added again.
    # @param delay [Numeric, nil] seconds; nil: the last delay
    # @return [self]
    def again(delay = nil); end

    # The timer keeps Loop#run alive again (the default).
    # @return [self]
    def ref; end

    # The timer no longer keeps Loop#run alive; it still fires while the loop runs.
    # @return [self]
    def unref; end

    # @return [Boolean] whether the timer keeps Loop#run alive
    def ref?; end
  end

  # The handle Loop#add_io returns (there is no Watcher.new). On a closed
  # loop #cancel, #active?, #ref? and #events still answer; #ref and #unref
  # raise Evix::ClosedError.
  class Watcher
    # Removes the watcher; idempotent, and no syscall.
    # @return [nil]
    def cancel; end

    # @return [Boolean] whether the watcher is registered (false after
    #   #cancel, and once a ONESHOT watcher fired)
    def active?; end

    # The watcher keeps Loop#run alive again (the default).
    # @return [self]
    def ref; end

    # The watcher no longer keeps Loop#run alive; its block still runs.
    # @return [self]
    def unref; end

    # @return [Boolean] whether the watcher keeps Loop#run alive
    def ref?; end

    # @return [Integer] the events it was added with (READ, WRITE, ONESHOT bits)
    def events; end
  end

  # The hooks below are native: a hook written in Ruby, called from C under a C
  # iterator, would leave its VM re-entry frames on every parked fiber's stack.

  class Scheduler
    # @return [Evix::Loop] the loop the scheduler runs on
    def loop; end

    # Fiber::Scheduler hook (Kernel#sleep): parks the calling fiber.
    # @param duration [Numeric, nil] seconds; nil: until #unblock
    # @return [nil]
    def kernel_sleep(duration = nil); end

    # Fiber::Scheduler hook (Mutex, Queue, ConditionVariable, Thread#join...):
    # parks the calling fiber until #unblock.
    # @param blocker [Object] what the fiber waits for
    # @param timeout [Numeric, nil] seconds; nil: no limit
    # @return [Boolean] false if +timeout+ passed first
    def block(blocker, timeout = nil); end

    # Fiber::Scheduler hook, from any thread: ends +fiber+'s wait in #block
    # or #kernel_sleep (nothing happens if it is not waiting there), the
    # fiber running on the loop's next turn. Another thread's wake is posted
    # to the loop, which ends the wait when it takes the post (unless the
    # wait ended otherwise meanwhile).
    # @param blocker [Object] what the fiber waited for
    # @param fiber [Fiber]
    # @return [nil]
    def unblock(blocker, fiber); end

    # Fiber::Scheduler hook: parks the calling fiber until +io+ is ready. A
    # regular file is ready at once, as Ruby reports it without a scheduler.
    # @param io [::IO]
    # @param events [Integer] IO::READABLE, IO::PRIORITY, IO::WRITABLE bits
    # @param timeout [Numeric, nil] seconds; nil: no limit
    # @return [Integer, false] the ready bits of +events+, false on timeout
    def io_wait(io, events, timeout = nil); end

    # Fiber::Scheduler hook: reads at least +length+ bytes (0: whatever is
    # there) into +buffer+ at +offset+, straight from the kernel (recv(2) on a
    # socket, read(2) made non-blocking for the call on other IOs). Bytes
    # Ruby's own read buffer holds for +io+ (an ungetc) come first.
    # @param io [::IO]
    # @param buffer [IO::Buffer]
    # @param length [Integer]
    # @param offset [Integer]
    # @return [Integer] the bytes read (fewer at end of stream), or -errno
    def io_read(io, buffer, length, offset = 0); end

    # Fiber::Scheduler hook: writes at least +length+ bytes (0: what the
    # kernel takes at once) from +buffer+ at +offset+, straight to the kernel
    # (send(2) on a socket, write(2) made non-blocking for the call on other IOs).
    # @param io [::IO]
    # @param buffer [IO::Buffer]
    # @param length [Integer]
    # @param offset [Integer]
    # @return [Integer] the bytes written, or -errno
    def io_write(io, buffer, length, offset = 0); end

    # #io_read as Ruby 4.1 calls it (Scheduler::Interface): one non-blocking
    # read of at most +length+ bytes into +buffer+ at +offset+; bytes Ruby's
    # own read buffer holds for +io+ (an ungetc) come first.
    # @param io [::IO]
    # @param buffer [IO::Buffer]
    # @param offset [Integer]
    # @param length [Integer]
    # @return [Integer] the bytes read (0 at end of stream, or for a +length+
    #   of 0 without a read), -EAGAIN if nothing is there, or -errno
    # @raise [ArgumentError] +offset+ + +length+ exceeds the buffer's size
    def io_read_once(io, buffer, offset, length); end

    # #io_write as Ruby 4.1 calls it (Scheduler::Interface): one non-blocking
    # write of at most +length+ bytes from +buffer+ at +offset+.
    # @param io [::IO]
    # @param buffer [IO::Buffer]
    # @param offset [Integer]
    # @param length [Integer]
    # @return [Integer] the bytes written (0 for a +length+ of 0), -EAGAIN
    #   if the kernel takes none now, or -errno
    # @raise [ArgumentError] +offset+ + +length+ exceeds the buffer's size
    def io_write_once(io, buffer, offset, length); end

    private

    # Sets the loop the scheduler runs on, once (from #initialize). A loop
    # the scheduler made belongs to the thread that first uses it: the one
    # the scheduler is installed on.
    # @param loop [Evix::Loop]
    # @param owned [Boolean] whether the scheduler made +loop+
    # @return [nil]
    def attach(loop, owned); end

    # On the loop's thread (#fiber_interrupt posts it): raises +exception+ in
    # +fiber+ if it is parked on the loop; a fiber that has left its wait
    # is left alone.
    # @param fiber [Fiber]
    # @param exception [Exception]
    # @return [nil]
    def interrupt_parked(fiber, exception); end

    # For the nursery's deadlock check: the fibers waiting in #block without
    # a timeout, and those in #kernel_sleep without a duration.
    # @return [Array(Integer, Integer)] [blockers, sleepers]
    def waits_by_kind; end
  end

  # A loop's pulse as its stall watchdog thread sees it (Loop#on_stall). It
  # holds the pulse, not the loop, and waits without the GVL.
  # @api private
  class StallProbe
    # A probe of +loop+'s pulse that finds stalls of +seconds+ or longer.
    # @param loop [Evix::Loop]
    # @param seconds [Numeric] the threshold, positive
    # @raise [TypeError] +loop+ is not an Evix::Loop
    # @raise [ArgumentError] a threshold that is not a positive number of seconds
    # @return [Evix::StallProbe]
    # @raise [Evix::ClosedError] the loop is closed
    def self.new(loop, seconds); end

    # Blocks until the loop has held one callback or fiber for the threshold,
    # other than the stall +last+ already reported.
    # @param last [Integer, nil] the #state of the stall reported last
    # @return [Array(Integer, Float), nil] the stall's state and the seconds it
    #   has lasted; nil once stopped, the loop is closed or gone, or after fork
    def wait(last); end

    # @return [Integer] the pulse now; the same while one stall lasts
    def state; end

    # Ends the watch, now and for good; from any thread.
    # @return [nil]
    def stop; end
  end

  class IO
    private

    # One recv(2) with MSG_DONTWAIT, as +io.read_nonblock(maxlen, exception: false)+;
    # an IO that is unusual for this (not a socket, bytes in Ruby's buffer,
    # a large read) goes to Ruby's method.
    # @param io [::IO]
    # @param maxlen [Integer]
    # @return [String, nil, :wait_readable] a new binary String, nil at end of stream
    def read_socket(io, maxlen); end

    # One send(2) with MSG_DONTWAIT and MSG_NOSIGNAL, as
    # +io.write_nonblock(data, exception: false)+ but never raising SIGPIPE.
    # @param io [::IO]
    # @param data [String]
    # @return [Integer, :wait_writable] the bytes the kernel took
    def write_socket(io, data); end

    # The line reader of #gets and #each_line: the line that starts at byte
    # +offset+ of +buffer+, ended by +separator+ within +limit+ bytes, or cut
    # at the limit; as it is in the buffer (its bytesize is what it uses).
    # @param buffer [String]
    # @param offset [Integer]
    # @param searched [Integer] bytes after +offset+ an earlier call searched
    #   without a line: the search resumes there
    # @param separator [String, nil] not empty; nil: lines end at the limit only
    # @param limit [Integer, nil] at most this many bytes; nil or negative: no limit
    # @return [String, false, nil] the line (+buffer+ itself when it is the
    #   whole buffer); false when the buffer holds no whole line (every byte
    #   after +offset+ searched); nil when the arguments are unusual (a
    #   separator that is empty or not a String, a limit not an Integer)
    def buffered_line(buffer, offset, searched, separator, limit); end

    # +line+ without its trailing +separator+ (and a "\r" before a "\n"
    # one), for #gets's +chomp: true+: cut in place, unless +line+ is frozen
    # (then a new String).
    # @param line [String]
    # @param separator [String]
    # @return [String] +line+ itself, cut or not, or a new String for a frozen one
    def chomp_line(line, separator); end
  end

  module HTTP
    # The HTTP/1.1 request head parser of an Evix::HTTP::Server (httparse,
    # in Rust; ext/evix/src/http/): one per server, holding its limits. Each
    # #parse writes the request's CGI keys and header fields straight into
    # the Rack env, and keeps the framing of that head for #content_length,
    # #chunked?, #keep_alive? and #expect_continue?. A refused request is not
    # an exception: #parse returns its status, negated, and #reason says why.
    class Parser
      # @param request_line [Integer] bytes of the request line (414 past it)
      # @param head [Integer] bytes of the whole head (431)
      # @param headers [Integer] header fields (431)
      # @param body [Integer] bytes of a body (413)
      # @param chunk_line [Integer] bytes of a chunk-size line (400)
      # @return [Evix::HTTP::Parser]
      # @raise [ArgumentError] a limit of 0
      # @raise [TypeError, RangeError] a limit that is not a non-negative Integer
      def self.new(request_line, head, headers, body, chunk_line); end

      # Parses the head at byte +offset+ of +buffer+. On success +env+ has
      # REQUEST_METHOD, PATH_INFO, QUERY_STRING, REQUEST_URI, SERVER_PROTOCOL
      # and a key per header field (HTTP_*, CONTENT_TYPE, CONTENT_LENGTH;
      # repeated fields joined with ", ", Cookie with "; "; names with "_"
      # dropped).
      # @param buffer [String] the connection's buffer (not kept)
      # @param offset [Integer] where the head starts
      # @param env [Hash] the request's env
      # @return [Integer, nil] nil: incomplete, read more; >= 0: the head's
      #   length; < 0: refused with that status, negated (400, 413, 414, 431, 505)
      def parse(buffer, offset, env); end

      # @return [Integer] the last head's Content-Length (0 without one or when chunked)
      def content_length; end

      # @return [Boolean] whether the last head's body is chunked
      def chunked?; end

      # @return [Boolean] whether the connection stays open after the last
      #   head's response (HTTP/1.1 without "Connection: close", HTTP/1.0
      #   with "Connection: keep-alive")
      def keep_alive?; end

      # @return [Boolean] whether the last head asked for "100 Continue"
      def expect_continue?; end

      # @return [String, nil] why the last refused head was refused
      def reason; end

      # @return [Integer] the body limit in bytes
      def max_body; end
    end

    # One chunked request body's decoder (ext/evix/src/http/chunked.rs),
    # fed the connection's buffer in place; within its parser's limits.
    class ChunkedDecoder
      # @param parser [Evix::HTTP::Parser] whose limits apply
      # @return [Evix::HTTP::ChunkedDecoder]
      def self.new(parser); end

      # Decodes from byte +offset+ of +buffer+, appending the data to +out+.
      # @param buffer [String]
      # @param offset [Integer]
      # @param out [String]
      # @return [Integer] bytes of +buffer+ used (>= 0), or the refusal's
      #   status, negated (400, 413, 431)
      def decode(buffer, offset, out); end

      # @return [Boolean] whether the last chunk and the trailers were read
      def done?; end

      # @return [String, nil] why the body was refused
      def reason; end
    end
  end
end
# rubocop:enable Style/Documentation
