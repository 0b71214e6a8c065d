# frozen_string_literal: true

# RbSys::VERSION is this stand-in gem's own version.
module RbSys
  VERSION = Gem.loaded_specs.fetch("rb_sys").version.to_s
end
