# frozen_string_literal: true

require "json"
require "rbconfig"

# Paths, names and environment shared by the build tasks (not a .rake file, so rake
# does not load it on its own; the .rake files require it).
module EvixBuild
  ROOT = File.expand_path("..", __dir__)

  module_function

  def cargo
    ENV.fetch("CARGO", "cargo")
  end

  # rb-sys finds Ruby through $RUBY: build against the Ruby that runs rake.
  def cargo_env
    { "RUBY" => RbConfig.ruby }
  end

  # cargo's target directory, honouring CARGO_TARGET_DIR and .cargo/config.
  def target_dir
    out = IO.popen([cargo, "metadata", "--format-version", "1", "--no-deps", "--offline"],
                   chdir: ROOT, err: File::NULL, &:read)
    dir = JSON.parse(out)["target_directory"] if Process.last_status.success?
    dir || File.expand_path(ENV.fetch("CARGO_TARGET_DIR", "target"), ROOT)
  rescue SystemCallError, JSON::ParserError
    File.expand_path(ENV.fetch("CARGO_TARGET_DIR", "target"), ROOT)
  end

  # What cargo calls the cdylib of package "evix" on this platform.
  def cargo_library_name
    case RbConfig::CONFIG["host_os"]
    when /darwin/ then "libevix.dylib"
    when /mswin|mingw|cygwin/ then "evix.dll"
    else "libevix.#{RbConfig::CONFIG.fetch("SOEXT", "so")}"
    end
  end

  # What Ruby requires as "evix/evix": evix.so, or evix.bundle on macOS.
  def extension_path
    File.join(ROOT, "lib", "evix", "evix.#{RbConfig::CONFIG.fetch("DLEXT")}")
  end

  def version
    File.read(File.join(ROOT, "lib", "evix", "version.rb"))[/VERSION\s*=\s*"([^"]+)"/, 1]
  end

  # Runs the block outside `bundle exec`'s environment (no -rbundler/setup, no Gemfile).
  def unbundled(&)
    if defined?(Bundler) && Bundler.respond_to?(:with_unbundled_env)
      Bundler.with_unbundled_env(&)
    else
      yield
    end
  end
end
