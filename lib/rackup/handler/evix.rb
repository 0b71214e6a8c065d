# frozen_string_literal: true

# rackup 2 looks a handler up here: `rackup -s evix config.ru`.
require "rackup/handler"
require "evix/http/rackup_handler"

module Rackup
  module Handler
    # Evix::HTTP::RackupHandler, under the name rackup 2 looks for.
    Evix = ::Evix::HTTP::RackupHandler
    register :evix, Evix
  end
end
