# frozen_string_literal: true

require "net/http"

module Bench
  # The Rack servers the HTTP rows compare, each started the way its users
  # start it on a config.ru of spec/fixtures/apps (the apps the specs run).
  # A command is built from (config.ru, port, workers); +workers+ is nil for
  # one process.
  # +env+: what the server's environment needs besides RackServers.env.
  RackServer = Struct.new(:name, :label, :command, :workers, :env, keyword_init: true) do
    def command_for(app, port)
      command.call(app, port, workers)
    end
  end

  # Starts and measures one of them.
  module RackServers
    HOST = "127.0.0.1"
    APPS = File.join(Harness::ROOT, "spec", "fixtures", "apps")

    module_function

    # The servers present on this Ruby, by name. Falcon is not packaged: it
    # runs from source checkouts named by EVIX_BENCH_FALCON (see bench/README.md).
    def all(versions)
      evix_rows = evix_serve? ? [evix, evix(workers: 2)] : []
      [*evix_rows, *puma(versions), *falcon, async_http(versions), thin(versions)].compact
    end

    # Whether this checkout's exe/evix has the serve command (its --help lists it).
    def evix_serve?
      return @evix_serve unless @evix_serve.nil?

      help = IO.popen(Harness.child_env, [ruby, File.join(Harness::ROOT, "exe", "evix"), "--help"],
                      err: %i[child out], &:read)
      @evix_serve = help.match?(/^\s+serve\b/)
    end

    # What the section says about the rows it could not have.
    def notes
      notes = []
      notes << "This checkout's exe/evix has no serve command: no evix rows." unless evix_serve?
      if ENV.fetch("EVIX_BENCH_FALCON", "").empty?
        notes << "Falcon is not packaged and was not given (EVIX_BENCH_FALCON, see bench/README.md): no Falcon rows."
      end
      notes
    end

    def ruby
      RbConfig.ruby
    end

    # +options+: more of evix serve's command-line options.
    def evix(workers: nil, options: [])
      label = ["evix serve", *(["--workers #{workers}"] if workers), *options].join(" ")
      command = lambda { |app, port, n|
        [ruby, "-I", File.join(Harness::ROOT, "lib"), File.join(Harness::ROOT, "exe", "evix"), "serve", app,
         "--bind", "tcp://#{HOST}:#{port}", *(["--workers", n.to_s] if n), *options]
      }
      RackServer.new(name: workers ? "evix_workers" : "evix", label: label, workers: workers, command: command)
    end

    # Puma 8 with 5 and 16 threads (its default and a larger pool), and in
    # cluster mode with two workers of 5 threads, the app preloaded.
    def puma(versions)
      version = versions["puma"] or return []
      command = lambda { |threads|
        lambda { |app, port, n|
          [ruby, "-S", "puma", "--silent", "-b", "tcp://#{HOST}:#{port}", "-t", "#{threads}:#{threads}",
           *(["-w", n.to_s, "--preload"] if n), app]
        }
      }
      [RackServer.new(name: "puma5", label: "puma #{version} -t 5:5", command: command.call(5)),
       RackServer.new(name: "puma16", label: "puma #{version} -t 16:16", command: command.call(16)),
       RackServer.new(name: "puma_workers", label: "puma #{version} -w 2 -t 5:5 --preload", workers: 2,
                      command: command.call(5))]
    end

    # EVIX_BENCH_FALCON: Falcon's source checkout, then those of the gems it
    # needs that the distribution lacks (async-http-cache, async-utilization),
    # separated by ":". Each one's lib/ goes on the load path.
    def falcon
      checkouts = ENV.fetch("EVIX_BENCH_FALCON", "").split(":").reject(&:empty?)
      return [] if checkouts.empty?

      bin = File.join(checkouts.first, "bin", "falcon")
      raise Harness::Failure, "EVIX_BENCH_FALCON: no #{bin}" unless File.exist?(bin)

      version = File.read(File.join(checkouts.first, "lib", "falcon", "version.rb"))[/VERSION = "(.+)"/, 1]
      libs = checkouts.flat_map { |dir| ["-I", File.join(dir, "lib")] }
      command = lambda { |app, port, _n|
        [ruby, *libs, bin, "serve", "--bind", "http://#{HOST}:#{port}", "--threaded", "-n", "1", "-c", app]
      }
      # Falcon's service controller runs Bundler.require(:preload) when it finds a Gemfile, and this
      # checkout's lists development gems the lane lacks: no Gemfile for it, as for the other servers.
      no_gemfile = { "BUNDLE_GEMFILE" => File.join(Dir.tmpdir, "evix-bench-no-gemfile", "Gemfile") }
      [RackServer.new(name: "falcon", label: "falcon #{version} --threaded -n 1 (from source)", command: command,
                      env: no_gemfile)]
    end

    def async_http(versions)
      return unless versions["async-http"] && versions["protocol-rack"]

      script = File.join(Harness::ROOT, "bench", "servers", "async_http_rack.rb")
      RackServer.new(name: "async_http",
                     label: "async-http #{versions["async-http"]} + protocol-rack #{versions["protocol-rack"]}",
                     command: ->(app, port, _n) { [ruby, script, app, port.to_s] })
    end

    def thin(versions)
      version = versions["thin"] or return
      RackServer.new(name: "thin", label: "thin #{version} (EventMachine)", command: lambda { |app, port, _n|
        [ruby, "-S", "thin", "-q", "-a", HOST, "-p", port.to_s, "-R", app, "start"]
      })
    end

    def ceiling
      RackServer.new(name: "ceiling", label: "raw Rust HTTP ceiling (epoll, no Rack)",
                     command: ->(_app, port, _n) { [Harness.ceiling, port.to_s, "http"] })
    end

    def app_path(app)
      File.join(APPS, "#{app}.ru")
    end

    # The environment the servers run in: the harness's, production mode (no
    # development middleware, Rails eager-loaded), plus +env+.
    def env(extra = {})
      Harness.child_env.merge("RACK_ENV" => "production", "RAILS_ENV" => "production").merge(extra)
    end
  end

  # One Rack server process (and what it forks), pinned, started on an app
  # and polled until it answers GET +path+.
  class RackServerRun
    BOOT_TIMEOUT = 90

    attr_reader :port

    def self.with(server, app, path: "/", env: {}, cpu: Harness::SERVER_CPU)
      run = new(server, app, path, env, cpu)
      yield run
    ensure
      run&.stop
    end

    def initialize(server, app, path, env, cpu)
      @port = Harness.free_port
      command = server.command_for(RackServers.app_path(app), @port)
      @child = Harness::Child.new(command, cpu: cpu, env: RackServers.env(env).merge(server.env || {}), pgroup: true)
      wait_until_answering(path)
    rescue StandardError
      @child&.finish(grace: 2)
      raise
    end

    def pid
      @child.pid
    end

    # The server and every process it forked.
    def pids
      Harness.process_tree(pid)
    end

    def cpu_seconds
      pids.sum { |p| Harness.cpu_seconds(p) }
    end

    # VmRSS / VmHWM (KiB) of each process.
    def memories
      pids.map { |p| Harness.memory(p) }.reject(&:empty?)
    end

    def stop
      @child.finish(grace: 3)
      @child.cleanup
    end

    private

    def wait_until_answering(path)
      deadline = Harness.now + BOOT_TIMEOUT
      until answers?(path)
        raise Harness::Failure, "exited before answering: #{@child.errors}" unless @child.alive?
        raise Harness::Failure, "not answering after #{BOOT_TIMEOUT} s: #{@child.errors}" if Harness.now > deadline

        sleep 0.1
      end
    end

    def answers?(path)
      response = Net::HTTP.start(RackServers::HOST, @port, open_timeout: 1, read_timeout: 30) { |http| http.get(path) }
      return true if response.is_a?(Net::HTTPSuccess)

      raise Harness::Failure, "GET #{path}: #{response.code} #{response.body.to_s[0, 200]}"
    rescue SystemCallError, Net::OpenTimeout, Net::ReadTimeout, IOError
      false
    end
  end
end
