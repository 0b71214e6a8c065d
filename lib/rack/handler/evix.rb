# frozen_string_literal: true

# Rack 2.2's rackup looks a handler up here: `rackup -s evix config.ru`.
require "rack/handler"
require "evix/http/rackup_handler"

# Rack 2.2 (its rackup part).
module Rack
  # Rack 2.2's registry of servers.
  module Handler
    # Evix::HTTP::RackupHandler, under the name Rack 2.2 looks for.
    Evix = ::Evix::HTTP::RackupHandler
    register "evix", "Rack::Handler::Evix"
  end
end
