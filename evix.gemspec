# frozen_string_literal: true

require_relative "lib/evix/version"

Gem::Specification.new do |spec|
  spec.name = "evix"
  spec.version = Evix::VERSION
  spec.authors = ["evix developers"]
  spec.license = "MIT"
  spec.summary = "A fast event loop for Ruby with a Rust core (epoll, kqueue, poll)"
  spec.description = <<~DESC.tr("\n", " ").strip
    evix is an event loop whose core is written in Rust and exposed to Ruby through
    magnus/rb-sys: timers, IO watchers, immediates and cross-thread wakeups, plus a
    Ruby layer for writing fiber-based TCP servers and clients as sequential code.
  DESC
  spec.required_ruby_version = ">= 3.1"
  spec.metadata["rubygems_mfa_required"] = "true"

  # An allow-list: the Ruby layer, signatures, the CLI and examples, and the Rust crate
  # with the workspace manifest and Cargo.lock (the extension builds with `cargo build
  # --locked`). Whatever else lies in the checkout (build output, a Makefile or
  # .sitearchdir.time from an in-place build, target/, specs, benchmarks) stays out,
  # and so does Rust code only `cargo test` compiles. spec/gem checks the result.
  packaged = %w[lib/**/*.rb sig/**/*.rbs exe/evix examples/**/*.rb ext/evix/extconf.rb ext/evix/Cargo.toml
                ext/evix/src/**/*.rs Cargo.toml Cargo.lock README.md LICENSE docs/api/ri/native.rb]
  rust_tests = %w[ext/evix/src/**/tests/**/* ext/evix/src/**/tests.rs ext/evix/src/**/*_test.rs
                  ext/evix/src/**/*_tests.rs ext/evix/src/**/testing.rs]
  spec.files = (Dir.glob(packaged, base: __dir__) - Dir.glob(rust_tests, base: __dir__)).sort

  # RDoc (and so ri) reads lib/ and these: the reference of the methods written in
  # Rust, rendered from docs/api/native.rb by `rake doc:ri` (gem:build runs it first).
  spec.extra_rdoc_files = ["README.md", *spec.files.grep(%r{\Adocs/api/ri/})]
  spec.rdoc_options = ["--main", "README.md"]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/evix/extconf.rb"]
  spec.bindir = "exe"
  spec.executables = spec.files.include?("exe/evix") ? ["evix"] : []
end
