# frozen_string_literal: true

require "net/http"
require "open3"
require "rbconfig"
require "socket"
require "tempfile"

# A Rack server started the way its users start it, on one of the apps in
# spec/fixtures/apps, in a process group of its own, outside Bundler (the
# apps' gems are the distribution's, which the bundle does not list). The
# server is `evix serve` unless EVIX_APP_SERVER names another (puma, thin):
# the same specs against a known-good server show that the specs are right.
class AppServer
  ROOT = File.expand_path("../..", __dir__)
  APPS = File.join(ROOT, "spec", "fixtures", "apps")
  HOST = "127.0.0.1"
  BOOT_TIMEOUT = 60

  # name => command line for (app path, port, workers or nil).
  COMMANDS = {
    "evix" => lambda { |app, port, workers|
      [RbConfig.ruby, "-I", File.join(ROOT, "lib"), File.join(ROOT, "exe", "evix"), "serve", app,
       "--bind", "tcp://#{HOST}:#{port}", *(["--workers", workers.to_s] if workers)]
    },
    "puma" => lambda { |app, port, workers|
      ["puma", "--silent", "-b", "tcp://#{HOST}:#{port}", "-t", "100:100", *(["-w", workers.to_s] if workers), app]
    },
    "thin" => lambda { |app, port, workers|
      raise ArgumentError, "thin runs one process here" if workers

      ["thin", "-q", "-a", HOST, "-p", port.to_s, "-R", app, "start"]
    }
  }.freeze

  attr_reader :port, :pid

  def self.kind
    ENV.fetch("EVIX_APP_SERVER", "evix")
  end

  # The environment the server and the probes run in: no Bundler, evix from
  # this checkout, production mode (as the apps are deployed), Rack::Lint on.
  def self.env
    cleared = ENV.keys.grep(/\ABUNDLE|\ARUBYOPT\z|\ARUBYLIB\z|\AGEM_/).to_h { |key| [key, nil] }
    cleared.merge("RUBYLIB" => File.join(ROOT, "lib"), "RACK_ENV" => "production", "RAILS_ENV" => "production",
                  "EVIX_APP_LINT" => "1")
  end

  # Why these specs cannot run here (the server or one of +libraries+ is
  # missing on this Ruby, or the Ruby expression +needs+ is false once they
  # are loaded), or nil.
  def self.unavailable_reason(*libraries, needs: nil)
    server_missing || libraries_missing(libraries, needs)
  end

  def self.server_missing
    @server_missing ||= {}
    return @server_missing[kind] if @server_missing.key?(kind)

    @server_missing[kind] =
      case kind
      when "evix"
        help, = Open3.capture2e(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), File.join(ROOT, "exe", "evix"),
                                "--help")
        "this checkout's exe/evix has no serve command" unless help.match?(/^\s+serve\b/)
      when *COMMANDS.keys
        "#{kind} is not installed" unless system("which", kind, out: File::NULL, err: File::NULL)
      else
        raise ArgumentError, "EVIX_APP_SERVER must be one of #{COMMANDS.keys.join(", ")} (got #{kind.inspect})"
      end
  end

  # One Ruby run that requires each library, so a missing gem skips with its name.
  def self.libraries_missing(libraries, needs)
    script = "#{libraries.inspect}.each { |lib| begin; require lib; rescue LoadError => e; " \
             "puts \"lacks \#{lib} (\#{e.message.lines.first.strip})\"; exit 1; end }\n" \
             "#{needs.inspect}.then { |code| code.nil? || eval(code) || (puts \"has not \#{code}\"; exit 1) }"
    out, status = Open3.capture2e(env, RbConfig.ruby, "-e", script)
    "Ruby #{RUBY_VERSION} here #{out.lines.first&.strip}" unless status.success?
  end

  # Starts the server on spec/fixtures/apps/+app+.ru, yields it, stops it.
  def self.run(app, **options)
    server = new(app, **options)
    yield server
  ensure
    server&.stop
  end

  def initialize(app, workers: nil, env: {})
    @port = free_port
    @log = Tempfile.new(["evix-app-server", ".log"])
    command = COMMANDS.fetch(self.class.kind).call(File.join(APPS, "#{app}.ru"), @port, workers)
    @pid = Process.spawn(self.class.env.merge(env), *command, in: File::NULL, out: @log.path, err: %i[child out],
                                                              chdir: ROOT, pgroup: true)
    wait_until_listening
  rescue StandardError
    stop
    raise
  end

  def url(path = "/")
    "http://#{HOST}:#{port}#{path}"
  end

  # What the server printed so far (for failure messages).
  def log
    File.read(@log.path)
  end

  # Whether the server process is still running.
  def alive?
    Process.wait2(@pid, Process::WNOHANG).nil?
  rescue Errno::ECHILD
    false
  end

  # TERM (a drain), then KILL of the whole process group past a deadline.
  def stop
    return unless @pid

    signal(:TERM)
    deadline = monotonic + 10
    sleep 0.05 while alive? && monotonic < deadline
    signal(:KILL)
    Process.wait(@pid) if alive?
  rescue Errno::ECHILD
    nil
  ensure
    @pid = nil
    @log&.close!
  end

  # Runs a client command (curl, ab...) under coreutils' timeout; its output and status.
  def self.client(*command, seconds: 60)
    Open3.capture2e("timeout", "-k", "5", seconds.to_s, *command)
  end

  private

  def signal(name)
    Process.kill(name, -@pid)
  rescue Errno::ESRCH
    nil
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def free_port
    server = TCPServer.new(HOST, 0)
    server.local_address.ip_port
  ensure
    server&.close
  end

  # Polls until a connection is accepted and answered (an app that boots,
  # like Rails, can take seconds); fails with the server's output if it exits.
  def wait_until_listening
    deadline = monotonic + BOOT_TIMEOUT
    loop do
      raise "#{self.class.kind} exited before listening on #{port}:\n#{log}" unless alive?
      return if answers?
      raise "#{self.class.kind} not answering on #{port} after #{BOOT_TIMEOUT} s:\n#{log}" if monotonic > deadline

      sleep 0.1
    end
  end

  def answers?
    Net::HTTP.start(HOST, port, open_timeout: 1, read_timeout: 30) { |http| http.get("/") }
    true
  rescue SystemCallError, Net::OpenTimeout, IOError
    false
  end
end
