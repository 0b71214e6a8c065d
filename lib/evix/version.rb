# frozen_string_literal: true

module Evix
  # The gem's version (evix.gemspec reads it here).
  VERSION = "0.1.0"
end
