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

  # The Ruby layer, the Rust crate with the workspace manifest and Cargo.lock (the
  # extension builds with `cargo build --locked`), signatures and the CLI. Never
  # specs, benchmarks or build output.
  root = __dir__
  dirs = %w[lib ext sig exe examples]
  root_files = %w[Cargo.toml Cargo.lock README.md LICENSE]
  build_output = %r{(\A|/)target/|\.(so|bundle|dll|dylib|o)\z|(\A|/)(Makefile|mkmf\.log)\z}
  candidates =
    if File.exist?(File.join(root, ".git"))
      begin
        # Tracked files plus new ones that .gitignore does not exclude.
        out = IO.popen(%W[git -C #{root} ls-files -z --cached --others --exclude-standard], err: File::NULL, &:read)
        out.split("\x0") if Process.last_status.success?
      rescue SystemCallError # no git executable
        nil
      end
    end
  candidates ||= Dir.glob("{#{dirs.join(",")}}/**/*", File::FNM_DOTMATCH, base: root) + root_files
  spec.files = candidates.select do |path|
    (root_files.include?(path) || dirs.any? { |dir| path.start_with?("#{dir}/") }) &&
      !path.match?(build_output) && File.file?(File.join(root, path))
  end.sort

  spec.require_paths = ["lib"]
  spec.extensions = ["ext/evix/extconf.rb"]
  spec.bindir = "exe"
  spec.executables = File.exist?(File.join(root, "exe", "evix")) ? ["evix"] : []
end
