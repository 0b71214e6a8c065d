# frozen_string_literal: true

# Rack 2.2's rackup looks a handler up here: `rackup -s evix config.ru`.
require "rack/handler"
require "evix/http/rackup_handler"

module Rack
  module Handler
    # Evix::HTTP::RackupHandler, under the name Rack 2.2 looks for.
    Evix = ::Evix::HTTP::RackupHandler
    register "evix", "Rack::Handler::Evix"
  end
end
