# frozen_string_literal: true

module Evix
  # The argument checks every layer shares, so that a bad value gets the same
  # error wherever it is passed. .seconds is native (ext/evix/src/ruby/
  # arguments.rs): the rule the loop applies to its own durations.
  # @api private
  module Arguments
    # +loop+ if it is an open Evix::Loop.
    # @param loop [Object] what the caller passed
    # @return [Evix::Loop]
    # @raise [TypeError] not a loop
    # @raise [Evix::ClosedError] a closed one
    def self.open_loop(loop)
      raise TypeError, "loop must be an Evix::Loop (got #{loop.inspect})" unless loop.is_a?(Loop)
      raise ClosedError, "loop is closed (#{loop.inspect})" if loop.closed?

      loop
    end
  end
end
