# frozen_string_literal: true

require "evix"

module Evix
  module HTTP
    # The rackup handler: `rackup -s evix config.ru` (rackup 2 finds it as
    # Rackup::Handler::Evix, Rack 2.2's rackup as Rack::Handler::Evix; both
    # are this module). It serves through Evix::HTTP.run.
    module RackupHandler
      module_function

      # Serves +app+ until SIGINT or SIGTERM (rackup's :Host, :Port,
      # :Workers; rackup's defaults for the first two).
      # @param app [#call]
      # @param options [Hash] rackup's options
      # @yieldparam handler [Module] this module, once listening (rackup's convention)
      # @return [Boolean] true after a clean drain
      def run(app, **options)
        host = options[:Host] || "127.0.0.1"
        port = Integer(options[:Port] || 9292)
        host = "[#{host}]" if host.include?(":") && !host.start_with?("[")
        workers = options[:Workers] && Integer(options[:Workers])
        Evix::HTTP.run(app, binds: ["tcp://#{host}:#{port}"], workers: workers) do |addresses|
          addresses.each { |address| $stdout.puts "evix serve listening on #{address.inspect_sockaddr}" }
          $stdout.flush
          yield self if block_given?
        end
      end

      # The options rackup lists for this handler in its help.
      # @return [Hash{String => String}]
      def valid_options
        {
          "Host=HOST" => "address to listen on (default 127.0.0.1)",
          "Port=PORT" => "port (default 9292)",
          "Workers=N" => "serve from N preforked processes"
        }
      end
    end
  end
end
