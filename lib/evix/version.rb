# frozen_string_literal: true

module Evix
  VERSION = "0.1.0"
end
