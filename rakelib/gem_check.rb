# frozen_string_literal: true

require "rbconfig"
require "rubygems/package"
require_relative "evix_build"

# What evix's gem may hold, packaged and installed, and the rb_sys stand-in that lets
# an install take extconf.rb's rb_sys branch offline. Used by `rake gem:check` and
# spec/gem (not a .rake file, so rake does not load it on its own). The lists allow
# rather than forbid, so new build output fails the check instead of shipping.
module EvixGemCheck
  DLEXT = RbConfig::CONFIG.fetch("DLEXT")

  # Every packaged file matches one of these.
  PACKAGED = [
    %r{\Alib/evix(/[a-z0-9_]+)*\.rb\z},
    %r{\Alib/rack(up)?/handler/evix\.rb\z}, # where rackup looks for `-s evix`
    %r{\Asig/[a-z0-9_/]+\.rbs\z},
    %r{\Aexe/evix\z},
    %r{\Aexamples/[a-z0-9_/]+\.rb\z},
    %r{\Aext/evix/(extconf\.rb|Cargo\.toml)\z},
    %r{\Aext/evix/src/[a-z0-9_/]+\.rs\z},
    /\A(Cargo\.toml|Cargo\.lock|README\.md|LICENSE)\z/
  ].freeze

  # Rust code only `cargo test` compiles: test modules in their own files and the
  # helpers they share. It matches PACKAGED too, so it is refused on its own.
  RUST_TESTS = %r{\Aext/evix/src/(.+/)?(tests/|tests\.rs\z|\w+_tests?\.rs\z|testing\.rs\z)}

  # What a user's build cannot do without.
  REQUIRED = %w[lib/evix.rb lib/evix/version.rb ext/evix/extconf.rb ext/evix/Cargo.toml ext/evix/src/lib.rs
                Cargo.toml Cargo.lock LICENSE README.md].freeze

  # An installed gem's directory holds what was packaged, RubyGems' copy of the
  # library in lib/ (RubyGems before 4.0 puts one there), and the Makefile, as for
  # every gem built with extconf.rb: RubyGems runs make in the gem's ext/evix, and
  # from 3.4 on runs `make clean` there after `make install`, failing the install
  # when the Makefile is gone ("Makefile not found"). Nothing else of the build stays.
  INSTALLED_EXTRAS = ["lib/evix/evix.#{DLEXT}", "ext/evix/Makefile"].freeze

  # RubyGems' extension directory: the library and RubyGems' own build notes.
  EXTENSION_FILES = ["evix/evix.#{DLEXT}", "gem.build_complete", "gem_make.out", "mkmf.log"].freeze

  # The stand-in's versions: one with the API extconf.rb uses, one from before it.
  RB_SYS_CURRENT = "0.9.128"
  RB_SYS_TOO_OLD = "0.9.58"

  module_function

  # The paths inside a built .gem, sorted.
  def packaged_files(gem_file)
    Gem::Package.new(gem_file).contents.sort
  end

  # One line per packaged file that should not be there, and per required one that is not.
  def packaging_problems(files)
    files.reject { |path| PACKAGED.any? { |pattern| pattern.match?(path) } }.map { |path| "#{path}: not allowed" } +
      files.grep(RUST_TESTS).map { |path| "#{path}: Rust test code" } +
      (REQUIRED - files).map { |path| "#{path}: missing" }
  end

  # One line per file an install left beyond the packaged ones and what RubyGems
  # adds, and for a missing installed library.
  def install_problems(gem_dir:, extension_dir:, packaged:)
    in_gem = files_under(gem_dir)
    in_extension = files_under(extension_dir)
    (in_gem - packaged - INSTALLED_EXTRAS).map { |path| "#{File.join(gem_dir, path)}: left by the build" } +
      (in_extension - EXTENSION_FILES).map { |path| "#{File.join(extension_dir, path)}: left by the build" } +
      (EXTENSION_FILES.first(1) - in_extension).map { |path| "#{File.join(extension_dir, path)}: missing" }
  end

  # Files (dotfiles too) under +dir+, relative to it.
  def files_under(dir)
    Dir.glob("**/*", File::FNM_DOTMATCH, base: dir).select { |path| File.file?(File.join(dir, path)) }.sort
  end

  # Installs the rb_sys stand-in (spec/gem/rb_sys_stand_in) as rb_sys +version+
  # into +gem_home+, building it in +work_dir+.
  def install_rb_sys_stand_in(version, gem_home:, work_dir:)
    source = File.join(EvixBuild::ROOT, "spec", "gem", "rb_sys_stand_in")
    gem_file = File.join(work_dir, "rb_sys-#{version}.gem")
    env = { "RB_SYS_STAND_IN_VERSION" => version }
    run!(env, "gem", "build", "rb_sys.gemspec", "--output", gem_file, chdir: source)
    run!({ "GEM_HOME" => gem_home, "GEM_PATH" => gem_home },
         "gem", "install", "--local", "--no-document", "--install-dir", gem_home, gem_file, chdir: work_dir)
  end

  # PATH without $CARGO_HOME/bin, where rustup puts cargo, or nil when cargo is also
  # elsewhere on PATH or not there (an install would find it anyway, or not at all).
  def path_without_cargo
    cargo_bin = File.join(ENV.fetch("CARGO_HOME") { File.join(Dir.home, ".cargo") }, "bin")
    return nil unless File.executable?(File.join(cargo_bin, "cargo"))

    dirs = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR)
    with_cargo = dirs.select { |dir| File.executable?(File.join(dir, "cargo")) }
    return nil unless with_cargo.all? { |dir| File.identical?(dir, cargo_bin) }

    (dirs - with_cargo).join(File::PATH_SEPARATOR)
  end

  def run!(env, *command, chdir:)
    out = IO.popen(env, command, chdir: chdir, err: %i[child out], &:read)
    raise "failed: #{command.join(" ")}\n#{out}" unless Process.last_status.success?

    out
  end
end
