# frozen_string_literal: true

require "evix"

module Evix
  # The example servers that `evix echo|chat|kv` runs. Each is a small class:
  # `new(host:, port:, ...)`, `start(loop)` (returns the Evix::TCPServer) and
  # `run`, which owns a loop until SIGINT or SIGTERM.
  module Examples
    # What the examples share: a loop of their own, signals, a draining stop.
    module Runner
      # Seconds `shutdown` gives connections to finish writing before forcing them.
      SHUTDOWN_TIMEOUT = 5

      # Starts the server on a new loop and yields it once it is listening.
      # Runs until SIGINT or SIGTERM, then drains the connections and returns.
      # @return [nil]
      def run
        loop = Evix::Loop.new
        server = start(loop)
        stop_on_signals(loop, server)
        yield server, loop if block_given?
        loop.run
        nil
      ensure
        loop&.close
      end

      # Drains the server; an example overrides this to say goodbye first.
      # @return [Integer] connections that had to be cut at the deadline
      def stop(server)
        forced = server.shutdown(timeout: SHUTDOWN_TIMEOUT)
        warn "evix: closed #{forced} connection(s) that did not finish in #{SHUTDOWN_TIMEOUT}s" if forced.positive?
        forced
      end

      private

      def stop_on_signals(loop, server)
        stopping = false
        %i[INT TERM].each do |signal|
          loop.add_signal(signal) do
            next if stopping

            stopping = true
            # Signal blocks run as plain loop callbacks; draining waits, so it gets a task.
            loop.spawn do
              stop(server)
              loop.stop
            end
          end
        end
      end
    end
  end
end
