# frozen_string_literal: true

module Evix
  # One self-pipe per loop for signals: the trap handler only writes the
  # signal number as a byte; a persistent, unref'd watcher reads it and runs
  # each block in a new task of the loop (normal context: the block may
  # wait, e.g. for TCPServer#shutdown's drain).
  #
  # The Ruby trap itself is process-wide and shared (see Registry): several
  # loops, on any threads, may handle one signal, and each gets every
  # delivery.
  class Signals
    # @return [::IO] the self-pipe's read end (the loop's own descriptor)
    attr_reader :reader

    # @param loop [Evix::Loop] the loop whose blocks this runs
    def initialize(loop)
      @loop = loop
      @handlers = {}
      # The signals registered for this loop, apart from their blocks: a
      # block may hold the loop, and the finalizer must not.
      @registered = []
      @reader, @writer = ::IO.pipe
      [@reader, @writer].each { |io| io.binmode.sync = true }
      @watcher = loop.add_io(@reader, READ) { dispatch }
      @watcher.unref
      # A loop dropped without #close: the registry still holds the pipe's
      # write end, so it is let go (and the traps restored) when this goes.
      ObjectSpace.define_finalizer(self, Signals.release(@registered, @writer))
    end

    # What a collected Signals leaves to do: built here, so that the proc
    # does not hold the object it outlives.
    # @api private
    # @param registered [Array<Integer>] the signal numbers, as they are
    #   when collected
    # @param writer [::IO] the self-pipe's write end
    # @return [Proc]
    def self.release(registered, writer)
      proc { Registry.release(registered, writer) }
    end

    # Runs +block+ on the loop for every +signal+; replaces this loop's
    # earlier block for it.
    # @param signal [Symbol, String, Integer] name (with or without "SIG") or number
    # @return [Integer] the signal number
    def add(signal, &block)
      signo = Signals.number(signal)
      raise ArgumentError, "add_signal requires a block" unless block

      unless @handlers.key?(signo)
        Registry.add(signo, @writer)
        @registered << signo
      end
      @handlers[signo] = block
      signo
    end

    # Stops handling +signal+ on this loop; the last loop to stop handling it
    # restores the handler that was there before evix.
    # @param signal [Symbol, String, Integer]
    # @return [Boolean] whether this loop handled it
    def remove(signal)
      signo = Signals.number(signal)
      return false unless @handlers.delete(signo)

      @registered.delete(signo)
      Registry.remove(signo, @writer)
      true
    end

    # @return [Boolean]
    def empty?
      @handlers.empty?
    end

    # Stops handling every signal and closes the pipe.
    # @return [void]
    def close
      ObjectSpace.undefine_finalizer(self)
      @handlers.each_key { |signo| Registry.remove(signo, @writer) }
      @handlers.clear
      @registered.clear
      @watcher.cancel
      @reader.close
      @writer.close
    end

    # Signal name (Symbol/String, with or without "SIG") or number to a number.
    # @param signal [Symbol, String, Integer] :TERM, "SIGTERM", 15...
    # @return [Integer]
    def self.number(signal)
      case signal
      when Integer
        return signal if Signal.list.value?(signal) && signal.positive?
      when Symbol, String
        number = Signal.list[signal.to_s.delete_prefix("SIG")]
        return number if number&.positive?
      else
        raise TypeError, "signal must be a Symbol, String or Integer (got #{signal.inspect})"
      end
      raise ArgumentError, "unknown signal #{signal.inspect}"
    end

    private

    # Each signal that arrived runs its block once, in a task started now: an
    # exception it raises propagates out of run like any callback's.
    def dispatch
      bytes = @reader.read_nonblock(4096, exception: false)
      return unless bytes.is_a?(String)

      bytes.unpack("C*").uniq.each do |signo|
        handler = @handlers[signo]
        Task.new(@loop, start: true) { handler.call(signo) } if handler
      end
    end

    # The process-wide side of signals: one Ruby trap per signal, shared by
    # every loop that handles it. The first loop to add a signal installs
    # the trap; the last one to remove it restores the handler that was there
    # before (unless someone else trapped the signal since: that handler
    # stays). The trap only writes the signal's byte to each registered
    # loop's self-pipe.
    #
    # Changes take a lock; the trap reads a frozen snapshot and takes none
    # (a trap handler may not lock a Mutex). A forked child inherits the
    # trap but none of the loops: on the child's first signal, or its first
    # change here, it gets the old handlers back (docs/architecture.md, "Fork").
    # @api private
    module Registry
      # One signal's state: the handler evix replaced, and the self-pipe
      # write ends of the loops handling it.
      Entry = Struct.new(:previous, :writers)

      # The Ruby trap for every signal evix handles (it gets the number).
      TRAP = proc { |signo| Registry.deliver(signo) }

      @lock = Mutex.new
      @pid = Process.pid
      @entries = {}.freeze # signo => Entry, both frozen: replaced, never changed
      @released = [] # [signos, writer] of collected loops, let go under the lock

      class << self
        # Registers +writer+ (a loop's self-pipe) for +signo+; installs the
        # trap for the first one.
        # @param signo [Integer]
        # @param writer [::IO]
        # @return [void]
        def add(signo, writer)
          synchronize do
            entry = @entries[signo]
            replaced = Signal.trap(signo, TRAP) # may raise (reserved signal): nothing changed yet
            previous = entry ? entry.previous : replaced
            writers = entry ? entry.writers + [writer] : [writer]
            update(signo, Entry.new(previous, writers.freeze).freeze)
          end
        end

        # Unregisters +writer+ for +signo+; the last one restores the
        # handler that evix replaced.
        # @param signo [Integer]
        # @param writer [::IO]
        # @return [void]
        def remove(signo, writer)
          synchronize { unregister(signo, writer) }
        end

        # A loop that was collected without #close (its finalizer): its
        # +writer+ goes from every signal in +signos+, then is closed. A
        # finalizer may run while this thread holds the lock (in the middle
        # of #add): then the holder does it before it lets go.
        # @param signos [Array<Integer>]
        # @param writer [::IO]
        # @return [void]
        def release(signos, writer)
          @released << [signos, writer]
          synchronize { unregister_released } unless @lock.owned?
        end

        # The trap: writes the signal's byte to every registered self-pipe
        # (dropped when a pipe is full: that loop already has a wake
        # pending). Takes no lock and allocates only the byte.
        # @param signo [Integer]
        # @return [void]
        def deliver(signo)
          entry = @entries[signo]
          return forked_child_got(signo, entry) unless Process.pid == @pid
          return unless entry

          byte = signo.chr
          entry.writers.each do |writer|
            writer.write_nonblock(byte, exception: false)
          rescue ::IOError, SystemCallError
            nil # that loop is closing its pipe right now
          end
        end

        private

        # Mutex#lock raises in a trap handler but #try_lock does not, and a
        # handler may call add_signal: so spin on try_lock (what it guards
        # never blocks). If this thread holds the lock, a trap handler
        # interrupted its own change: waiting would never end.
        def synchronize
          until @lock.try_lock
            raise Error, "add_signal/remove_signal called from a trap handler that interrupted one" if @lock.owned?

            Thread.pass
          end
          begin
            forget_parent if Process.pid != @pid
            yield
          ensure
            unregister_released
            @lock.unlock
          end
          # One released between the look above and the unlock.
          synchronize { unregister_released } unless @released.empty? || @lock.owned?
        end

        def unregister(signo, writer)
          entry = @entries[signo]
          return unless entry&.writers&.include?(writer)

          writers = entry.writers.reject { |w| w.equal?(writer) }.freeze
          if writers.empty?
            restore(signo, entry.previous)
            update(signo, nil)
          else
            update(signo, Entry.new(entry.previous, writers).freeze)
          end
        end

        def unregister_released
          while (signos, writer = @released.shift)
            signos.each { |signo| unregister(signo, writer) }
            writer.close unless writer.closed?
          end
        end

        def update(signo, entry)
          entries = @entries.dup
          entry ? entries[signo] = entry : entries.delete(signo)
          @entries = entries.freeze
        end

        # Puts +previous+ back if evix's trap is still installed; a handler
        # trapped over evix's since stays.
        def restore(signo, previous)
          current = Signal.trap(signo, previous || "DEFAULT")
          Signal.trap(signo, current || "DEFAULT") unless current.equal?(TRAP)
        end

        # In a forked child: the loops (and their pipes) are the parent's.
        def forget_parent
          @entries.each { |signo, entry| restore(signo, entry.previous) }
          @entries = {}.freeze
          @pid = Process.pid
        end

        # A signal in a forked child that never changed a handler: this
        # signal's old handler comes back and gets it.
        def forked_child_got(signo, entry)
          restore(signo, entry&.previous)
          Process.kill(signo, Process.pid)
        end
      end
    end
  end
end
