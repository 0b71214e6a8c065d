# frozen_string_literal: true

# rackup 2 looks a handler up here: `rackup -s evix config.ru`.
require "rackup/handler"
require "evix/http/rackup_handler"

# rackup 2.
module Rackup
  # rackup 2's registry of servers.
  module Handler
    # Evix::HTTP::RackupHandler, under the name rackup 2 looks for.
    Evix = ::Evix::HTTP::RackupHandler
    register :evix, Evix
  end
end
