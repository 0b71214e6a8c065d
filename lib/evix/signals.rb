# frozen_string_literal: true

module Evix
  # One self-pipe per loop for signals: the trap handler only writes the
  # signal number as a byte; a persistent, unref'd watcher reads it and runs
  # the blocks on the loop, in normal context.
  class Signals
    # @return [::IO] the self-pipe's read end (the loop's own descriptor)
    attr_reader :reader

    def initialize(loop)
      @loop = loop
      @handlers = {}
      @previous = {}
      @reader, @writer = ::IO.pipe
      [@reader, @writer].each { |io| io.binmode.sync = true }
      @watcher = loop.add_io(@reader, READ) { dispatch }
      @watcher.unref
    end

    # @return [Integer] the signal number
    def add(signal, &block)
      signo = Signals.number(signal)
      raise ArgumentError, "add_signal requires a block" unless block

      writer = @writer
      byte = [signo].pack("C")
      pid = Process.pid
      previous = Signal.trap(signo) do
        # Only a byte: a trap handler must not run loop code. A forked child
        # inherits this trap but not the loop: it gets the old handler back.
        next writer.write_nonblock(byte, exception: false) if Process.pid == pid

        Signal.trap(signo, @previous[signo] || "DEFAULT")
        Process.kill(signo, Process.pid)
      end
      @previous[signo] = previous unless @handlers.key?(signo)
      @handlers[signo] = block
      signo
    end

    # Restores the handler that was there before #add. @return [Boolean]
    def remove(signal)
      signo = Signals.number(signal)
      return false unless @handlers.delete(signo)

      Signal.trap(signo, @previous.delete(signo) || "DEFAULT")
      true
    end

    # @return [Boolean]
    def empty?
      @handlers.empty?
    end

    # Restores every handler and closes the pipe.
    def close
      @handlers.keys.each { |signo| remove(signo) } # rubocop:disable Style/HashEachMethods -- remove deletes
      @watcher.cancel
      @reader.close
      @writer.close
    end

    # Signal name (Symbol/String, with or without "SIG") or number to a number.
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

    def dispatch
      bytes = @reader.read_nonblock(4096, exception: false)
      return unless bytes.is_a?(String)

      bytes.unpack("C*").uniq.each do |signo|
        handler = @handlers[signo]
        handler&.call(signo)
      end
    end
  end
end
