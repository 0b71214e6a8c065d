# frozen_string_literal: true

# A stand-in for the rb_sys gem, for testing ext/evix/extconf.rb's rb_sys branch
# where the real gem cannot be had (no RubyGems.org, not packaged by Debian 12). Its
# version comes from RB_SYS_STAND_IN_VERSION when the gem is built.
Gem::Specification.new do |spec|
  spec.name = "rb_sys"
  spec.version = ENV.fetch("RB_SYS_STAND_IN_VERSION")
  spec.authors = ["evix developers"]
  spec.license = "MIT"
  spec.summary = "evix's test stand-in for rb_sys/mkmf"
  spec.required_ruby_version = ">= 3.1"
  spec.files = %w[lib/rb_sys/version.rb lib/rb_sys/mkmf.rb]
  spec.metadata["rubygems_mfa_required"] = "true"
end
