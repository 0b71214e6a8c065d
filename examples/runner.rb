# frozen_string_literal: true

require "evix"

module Evix
  # The example servers that `evix echo|chat|kv` runs. Each is a small class:
  # `new(host:, port:, verbose:, ...)`, `start(loop)` (returns the
  # Evix::TCPServer) and `run`, which owns a loop until SIGINT or SIGTERM.
  module Examples
    # What the examples share: a loop of their own, signals, a draining stop
    # that says on stderr how it went, and (with verbose) a line per
    # connection opened or closed.
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

      # Drains the server, then says on stderr how long that took and how
      # many connections finished or were cut at the deadline. An example
      # overrides this to say goodbye first.
      # @return [Integer] connections that had to be cut at the deadline
      def stop(server)
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        open = server.connections
        forced = server.shutdown(timeout: SHUTDOWN_TIMEOUT)
        took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        warn format("evix %<name>s: shut down in %<took>.2fs: %<drained>d connection(s) drained, " \
                    "%<forced>d cut at the %<limit>ds deadline",
                    name: example_name, took: took, drained: open - forced, forced: forced, limit: SHUTDOWN_TIMEOUT)
        forced
      end

      private

      # Runs the block for one connection; with verbose, logs its start and
      # end on stderr with the peer's address and how many are open.
      def logged(client)
        return yield unless @verbose

        @open = (@open || 0) + 1
        peer = client.remote_address&.inspect_sockaddr
        warn "evix #{example_name}: #{peer} connected (#{@open} open)"
        begin
          yield
        ensure
          @open -= 1
          warn "evix #{example_name}: #{peer} disconnected (#{@open} open)"
        end
      end

      def example_name
        self.class.name.split("::").last.downcase
      end

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
