# frozen_string_literal: true

module Evix
  # Evix::HTTP's runner: what `evix serve` and the rackup handler start.
  module HTTP
    # Seconds a drain (SIGTERM, SIGINT) gives requests in progress.
    DRAIN_TIMEOUT = 5

    # A listening address, as `evix serve --bind` takes it:
    # "tcp://HOST:PORT" ("tcp://[::1]:PORT" for IPv6) or "unix:PATH".
    Bind = Struct.new(:host, :port, :path) do
      # @param url [String]
      # @return [Evix::HTTP::Bind]
      # @raise [ArgumentError] not one of the two forms, or a port out of range
      def self.parse(url)
        case url
        when %r{\Aunix:(?://)?(.+)\z} then new(nil, nil, Regexp.last_match(1))
        when %r{\Atcp://\[([^\]]+)\]:(\d+)\z}, %r{\Atcp://([^:/\[\]]+):(\d+)\z}
          port = Integer(Regexp.last_match(2), 10)
          raise ArgumentError, "port out of range in #{url.inspect}" unless port.between?(0, 65_535)

          new(Regexp.last_match(1), port, nil)
        else
          raise ArgumentError, "bind must be tcp://HOST:PORT or unix:PATH (got #{url.inspect})"
        end
      end

      # @return [Hash] the Evix::HTTP::Server options that listen here
      def options
        path ? { path: path } : { host: host, port: port }
      end
    end

    module_function

    # Loads a rackup file (config.ru) with Rack::Builder.
    # @param path [String]
    # @return [#call] the app
    # @raise [ArgumentError] no such file
    # @raise [LoadError] Rack is not installed
    def load_app(path)
      raise ArgumentError, "no rackup file at #{path}" unless File.file?(path)

      require "rack"
      app = Rack::Builder.parse_file(path)
      app.is_a?(Array) ? app.first : app # Rack 2 returns [app, options]
    end

    # Serves +app+ until SIGINT or SIGTERM has drained it: what `evix
    # serve` and the rackup handler run. One process with its own loop and
    # evix's Fiber scheduler; with +workers+, Evix::Workers forks that many
    # from this process (the app is loaded already: preloaded), SIGHUP rolls
    # them one at a time. SIGQUIT prints the live tasks (each worker's).
    # @param app [#call] a Rack app
    # @param binds [Array<String>] where to listen (see Bind); with
    #   +workers+, one tcp:// address
    # @param workers [Integer, nil] processes to fork (nil: serve here)
    # @param drain_timeout [Numeric] seconds a drain gives requests in progress
    # @param options [Hash] Evix::HTTP::Server's options (ssl_context:,
    #   access_log:, the limits)
    # @yieldparam addresses [Array<Addrinfo>] once listening
    # @return [Boolean] true after a clean drain
    # @raise [ArgumentError] a bad bind or option
    def run(app, binds: ["tcp://127.0.0.1:9292"], workers: nil, drain_timeout: DRAIN_TIMEOUT, **options, &ready)
      binds = binds.map { |url| Bind.parse(url) }
      raise ArgumentError, "no bind given" if binds.empty?
      return run_workers(app, binds, workers, drain_timeout, options, &ready) if workers

      serve_here(app, binds, drain_timeout, options, &ready)
    end

    # One process: a loop, the Fiber scheduler, a Server per bind.
    def serve_here(app, binds, drain_timeout, options)
      Evix.run do
        loop = Fiber.scheduler.loop
        servers = []
        binds.each { |bind| servers << Server.new(app, loop: loop, **options, **bind.options) }
        stop = Thread::Queue.new
        %i[INT TERM].each { |signal| loop.add_signal(signal) { stop << signal } }
        loop.add_signal(:QUIT) { loop.print_tasks }
        loop.on_stall_from_env
        yield servers.map(&:local_address) if block_given?
        stop.pop
        drain(servers, drain_timeout)
      ensure
        servers&.each(&:close)
      end
    end
    private_class_method :serve_here

    # Drains every server against one deadline; whether none was forced.
    def drain(servers, timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      servers.sum do |server|
        server.shutdown(timeout: [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max)
      end.zero?
    end
    private_class_method :drain

    def run_workers(app, binds, count, drain_timeout, options)
      bind = binds.first
      raise ArgumentError, "with workers, serve one tcp:// address (got #{binds.size} binds)" if binds.size > 1
      raise ArgumentError, "with workers, serve a tcp:// address (got unix:#{bind.path})" if bind.path

      workers = Workers.new(bind.host, bind.port, count: count, timeout: drain_timeout) do |loop, listener|
        Fiber.set_scheduler(Scheduler.new(loop))
        loop.on_stall_from_env
        loop.add_signal(:QUIT) { loop.print_tasks }
        Server.new(app, loop: loop, host: listener, port: nil, multiprocess: true, **options)
      end
      yield [workers.local_address] if block_given?
      workers.run
    end
    private_class_method :run_workers
  end
end
