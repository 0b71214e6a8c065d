# frozen_string_literal: true

require "rbconfig"
require "tmpdir"
require_relative "evix_build"
require_relative "gem_check"
require_relative "ri_doc"

# Installs the gem at +gem_file+ into its own GEM_HOME under +dir+ (+name+), checks
# what the install left and that Ruby loads it from there. +gem_path+: more gem
# directories to see (the rb_sys stand-in's); +env+: more environment; +ri_docs+: let
# RubyGems write the ri documentation, as a plain `gem install` does, and check that
# ri finds a method written in Rust. Returns the installed gem's Makefile, which
# tells which branch of extconf.rb wrote it.
def evix_gem_check_install(name, gem_file, dir:, env:, gem_path: [], ri_docs: false)
  gem_home = File.join(dir, name)
  env = env.merge("GEM_HOME" => gem_home, "GEM_PATH" => [gem_home, *gem_path].join(File::PATH_SEPARATOR),
                  "RUBYLIB" => nil, "RUBYOPT" => nil)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  sh env, "gem", "install", "--local", ri_docs ? "--document=ri" : "--no-document", "--install-dir", gem_home, gem_file,
     chdir: dir
  seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

  spec = Gem::Specification.load(File.join(gem_home, "specifications", "evix-#{EvixBuild.version}.gemspec"))
  spec.base_dir = gem_home # where extension_dir and gem_dir are
  evix_gem_check_tree(name, spec, gem_file)
  # RubyGems 3.4 and later run `make clean` in the gem's ext/evix after the
  # install (the reason the Makefile stays: without it they fail the install).
  # The RubyGems here may not: it must leave the tree and the library as they are.
  sh env, "make", "clean", chdir: File.join(spec.gem_dir, "ext", "evix")
  evix_gem_check_tree(name, spec, gem_file)

  extension = evix_gem_check_load(name, env, gem_home, dir)
  evix_gem_check_ri(name, env, dir) if ri_docs
  puts "gem:check (#{name}): OK in #{seconds.round} s: installed as packaged, loads #{extension}"
  File.read(File.join(spec.gem_dir, "ext", "evix", "Makefile"))
end

# Stops unless the installed gem of +spec+ holds what +gem_file+ packaged, plus
# only what RubyGems adds (EvixGemCheck.install_problems).
def evix_gem_check_tree(name, spec, gem_file)
  problems = EvixGemCheck.install_problems(gem_dir: spec.gem_dir, extension_dir: spec.extension_dir,
                                           packaged: EvixGemCheck.packaged_files(gem_file))
  abort "gem:check (#{name}): the installed gem is not as packaged:\n  #{problems.join("\n  ")}" unless problems.empty?
end

# Stops unless `ri Evix::Loop#add_timer` (a method written in Rust, documented in
# docs/api/native.rb) shows its comment, with the YARD tags made into RDoc's lists.
def evix_gem_check_ri(name, env, dir)
  out = IO.popen(env, %w[ri --no-pager --format=rdoc Evix::Loop#add_timer], chdir: dir, err: %i[child out], &:read)
  readable = out.include?("Calls the block once after") && out.include?("Returns:") && !out.include?("@param")
  return puts("gem:check (#{name}): ri Evix::Loop#add_timer shows its documentation") if
    Process.last_status.success? && readable

  abort "gem:check (#{name}): ri Evix::Loop#add_timer does not show the native method's documentation:\n#{out}"
end

# Loads evix from +gem_home+ in a new Ruby and makes a loop; returns the extension's path.
def evix_gem_check_load(name, env, gem_home, dir)
  script = 'p Evix::Loop.new.backend; puts $LOADED_FEATURES.grep(%r{/evix/evix\.\w+\z})'
  out = IO.popen(env, [RbConfig.ruby, "-revix", "-e", script], chdir: dir, &:read)
  backend, extension = out.lines.map(&:chomp)
  return extension if Process.last_status.success? && backend&.match?(/\A:[a-z]\w*\z/) &&
                      extension&.start_with?(gem_home)

  abort "gem:check (#{name}): expected a backend Symbol and an extension loaded from #{gem_home}, got:\n#{out}"
end

namespace :gem do
  desc "Build pkg/evix-VERSION.gem"
  task build: "doc:ri" do
    mkdir_p "pkg"
    sh "gem", "build", "evix.gemspec", "--output", "pkg/evix-#{EvixBuild.version}.gem"
  end

  desc "Build the gem, check its files against the allow-list, install it twice into scratch GEM_HOMEs " \
       "(extconf.rb's own Makefile, then rb_sys's with cargo off PATH), check what each left (and after " \
       "the `make clean` of RubyGems >= 3.4), load it"
  task check: "doc:ri" do
    EvixBuild.unbundled do
      Dir.mktmpdir("evix-gem-check-") do |dir|
        gem_file = File.join(dir, "evix-#{EvixBuild.version}.gem")
        sh "gem", "build", "evix.gemspec", "--output", gem_file
        problems = EvixGemCheck.packaging_problems(EvixGemCheck.packaged_files(gem_file))
        abort "gem:check: the gem's files are not as allowed:\n  #{problems.join("\n  ")}" unless problems.empty?
        unless EvixGemCheck.packaged_files(gem_file).include?(EvixRiDoc::TARGET)
          abort "gem:check: #{EvixRiDoc::TARGET} (the native methods' reference for ri) is not in the gem"
        end

        # Both installs build into one CARGO_TARGET_DIR, kept between runs: the second
        # and later builds only recompile the evix crate. EVIX_GEM_CHECK_COLD=1 builds
        # like a user's install (and checks that ./target is removed again).
        cold = ENV["EVIX_GEM_CHECK_COLD"] == "1"
        env = { "CARGO_TARGET_DIR" => cold ? nil : File.join(EvixBuild::ROOT, "tmp", "gem-check-target") }

        plain = evix_gem_check_install("plain", gem_file, dir: dir, env: env, ri_docs: true)
        unless plain.include?("evix: build the Rust")
          abort "gem:check (plain): extconf.rb did not write its own Makefile"
        end

        # The rb_sys branch, through the stand-in (the real gem is neither on Debian
        # nor reachable here), with cargo only in $CARGO_HOME/bin where the defaults
        # of rb_sys alone would download a toolchain.
        rb_sys_home = File.join(dir, "rb_sys")
        EvixGemCheck.install_rb_sys_stand_in(EvixGemCheck::RB_SYS_CURRENT, gem_home: rb_sys_home, work_dir: dir)
        path = EvixGemCheck.path_without_cargo
        puts "gem:check (rb_sys): #{path ? "cargo off PATH" : "cargo on PATH (it is not only in $CARGO_HOME/bin)"}"
        env = env.merge("PATH" => path || ENV.fetch("PATH"))
        rb_sys = evix_gem_check_install("rb_sys", gem_file, dir: dir, env: env, gem_path: [rb_sys_home])
        abort "gem:check (rb_sys): rb_sys did not write the Makefile" unless rb_sys.include?("rb_sys stand-in")
      end
    end
  end
end
