# frozen_string_literal: true

# The Rack apps the HTTP server's specs serve, run as
#   ruby -I lib spec/support/http_apps.rb '{"limits": {...}, "tls": false, "bind": "tcp://127.0.0.1:0"}'
# through Evix::HTTP.run (what `evix serve` runs): it prints
# "evix serve listening on HOST:PORT" once ready. Every app is wrapped in
# Rack::Lint when Rack is installed, so every env and response is checked
# against the SPEC of the Rack that is there (2.2 or 3.x).

require "json"
require "digest"
require "uri" # Rack 2.2's Lint uses URI without loading it
require "evix"

# One app, routed by path.
class HTTPSpecApp
  def initialize
    @closed = 0
  end

  # rubocop:disable Metrics -- one route per case, each small
  def call(env)
    case env["PATH_INFO"]
    when "/hello" then [200, { "content-type" => "text/plain" }, ["hello"]]
    when "/env"
      keys = %w[REQUEST_METHOD SCRIPT_NAME PATH_INFO QUERY_STRING SERVER_NAME SERVER_PORT SERVER_PROTOCOL
                REMOTE_ADDR HTTP_HOST HTTP_X_TWICE HTTP_COOKIE CONTENT_TYPE CONTENT_LENGTH rack.url_scheme]
      text(JSON.generate(keys.to_h { |key| [key, env[key]] }))
    when "/echo"
      input = env["rack.input"]
      body = input.read
      again = if input.respond_to?(:rewind) # Rack 3's SPEC has no rewind (evix's input has it)
                input.rewind
                input.read
              else
                body
              end
      text(JSON.generate("size" => body.bytesize, "sha" => Digest::SHA256.hexdigest(body), "same" => body == again,
                         "encoding" => body.encoding.name))
    when "/lines"
      lines = []
      env["rack.input"].each { |line| lines << line }
      text(lines.length.to_s)
    when "/each" then [200, { "content-type" => "text/plain" }, Parts.new(%w[one two three], self)]
    when "/closed" then text(@closed.to_s)
    when "/big" then [200, { "content-type" => "text/plain" }, Parts.new(["x" * 65_536] * 64, self)]
    when "/stream"
      [200, { "content-type" => "text/plain" }, lambda { |stream|
        stream.write("streamed ")
        stream.write("body")
        stream.close
      }]
    when "/hijack"
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nhijacked")
      io.close
      [200, {}, []]
    when "/response_hijack"
      [200, { "content-type" => "text/plain", "rack.hijack" => lambda { |stream|
        stream.write("raw bytes")
        stream.close
      } }, []]
    when "/fail" then raise "the app failed on purpose"
    when "/sleep"
      sleep Float(env["QUERY_STRING"])
      text("slept")
    when "/head" then [200, { "content-type" => "text/plain", "content-length" => "4" }, Parts.new(["body"], self)]
    when "/nocontent" then [204, {}, []]
    when "/length" then [200, { "content-type" => "text/plain", "content-length" => "2" }, %w[o k]]
    when "/multi" then [200, { "content-type" => "text/plain", "set-cookie" => multi_value(%w[a=1 b=2]) }, ["ok"]]
    when "/close" then [200, { "content-type" => "text/plain", "connection" => "close" }, ["bye"]]
    else [404, { "content-type" => "text/plain" }, ["not found"]]
    end
  end
  # rubocop:enable Metrics

  def closed!
    @closed += 1
  end

  private

  # A field with several values as the Rack there wants it: an Array (Rack
  # 3), lines of one String (Rack 2).
  def multi_value(values)
    defined?(Rack.release) && Rack.release < "3" ? values.join("\n") : values
  end

  def text(string)
    [200, { "content-type" => "text/plain" }, [string]]
  end

  # A body without to_ary, that counts its close.
  class Parts
    def initialize(parts, app)
      @parts = parts
      @app = app
    end

    def each(&)
      @parts.each(&)
    end

    def close
      @app.closed!
    end
  end
end

if $PROGRAM_NAME == __FILE__
  config = JSON.parse(ARGV.fetch(0, "{}"))
  app = HTTPSpecApp.new
  begin
    require "rack"
    require "rack/lint"
    unless config["no_lint"]
      linted = Rack::Lint.new(app)
      bare = app
      # Rack 2's Lint hides a body's to_ary (so the server can only chunk it)
      # and refuses streaming bodies: on Rack 2 the routes whose specs are
      # about framing run bare.
      bare_paths = Rack.release < "3" ? %w[/hello /head /close /stream /big] : []
      bare_paths << "/response_hijack" # Rack 3's SPEC has no response hijack
      app = ->(env) { (bare_paths.include?(env["PATH_INFO"]) ? bare : linted).call(env) }
    end
  rescue LoadError
    nil # without Rack: the app bare
  end
  options = config.fetch("limits", {}).transform_keys(&:to_sym)
  if config["tls"]
    require "openssl"
    require_relative "tls_certs"
    options[:ssl_context] = EvixTLSCerts.server_context
  end
  options[:access_log] = File.open(config["access_log"], "a").tap { |f| f.sync = true } if config["access_log"]
  $stdout.sync = true
  Evix::HTTP.run(app, binds: config.fetch("binds", ["tcp://127.0.0.1:0"]), workers: config["workers"],
                      **options) do |addresses|
    addresses.each do |address|
      where = address.unix? ? "unix:#{address.unix_path}" : "#{address.ip_address}:#{address.ip_port}"
      puts "evix serve listening on #{where}"
    end
  end
end
