# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "open3"
require "tmpdir"
require_relative "../../rakelib/gem_check"

# ext/evix/extconf.rb as RubyGems runs it ($SOURCE_DATE_EPOCH set, a scratch
# GEM_HOME with or without rb_sys), then `make -n`: the commands each Makefile
# would run, without compiling (`rake gem:check` compiles and installs both ways).
RSpec.describe "ext/evix/extconf.rb" do
  rm_rf = RbConfig::CONFIG.fetch("RMALL", "rm -fr")

  before(:all) do
    @homes = Dir.mktmpdir("evix-extconf-homes-")
    EvixBuild.unbundled do
      [EvixGemCheck::RB_SYS_CURRENT, EvixGemCheck::RB_SYS_TOO_OLD].each do |version|
        EvixGemCheck.install_rb_sys_stand_in(version, gem_home: File.join(@homes, version), work_dir: @homes)
      end
    end
  end

  after(:all) { FileUtils.rm_rf(@homes) }

  include_context "in a temporary directory"

  # Runs extconf.rb in a new build dir with +gems+ as the only gem directory.
  # Returns [the build dir, its output, success?].
  def configure(gems, env = {})
    build = Dir.mktmpdir("build-", @dir)
    gem_home = gems ? File.join(@homes, gems) : File.join(@dir, "no-gems")
    env = { "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "SOURCE_DATE_EPOCH" => "1" }.merge(env)
    extconf = File.join(EvixBuild::ROOT, "ext", "evix", "extconf.rb")
    out, status = EvixBuild.unbundled { Open3.capture2e(env, RbConfig.ruby, extconf, chdir: build) }
    [build, out, status.success?]
  end

  # The commands `make -n target` prints, one per line (continued lines joined).
  def dry_run(build, target, env = {})
    out, status = Open3.capture2e(env, "make", "-n", target, chdir: build)
    expect(status).to be_success, out
    out.gsub(/\\\n\s*/, " ").lines.map(&:strip)
  end

  def cargo_lines(commands) = commands.grep(/cargo"? build/).grep_v(/\Aecho /)

  let(:cargo_home) { File.join(@dir, "cargo-home") }
  let(:path_dirs) { ENV.fetch("PATH").split(File::PATH_SEPARATOR) }

  # This machine's cargo, linked into a new CARGO_HOME's bin/.
  def link_cargo_home
    real = path_dirs.map { |dir| File.join(dir, "cargo") }.find { |path| File.executable?(path) }
    skip "no cargo on PATH" unless real
    FileUtils.mkdir_p(File.join(cargo_home, "bin"))
    File.symlink(real, File.join(cargo_home, "bin", "cargo"))
    File.join(cargo_home, "bin", "cargo")
  end

  # The environment of an install that can find cargo only in $CARGO_HOME/bin.
  def cargo_off_path
    link_cargo_home
    path = path_dirs.reject { |dir| File.executable?(File.join(dir, "cargo")) }
    skip "cargo shares its PATH directory with make" unless path.any? { |dir| File.executable?(File.join(dir, "make")) }
    { "PATH" => path.join(File::PATH_SEPARATOR), "CARGO_HOME" => cargo_home, "CARGO" => nil }
  end

  { "without rb_sys" => nil, "with rb_sys #{EvixGemCheck::RB_SYS_CURRENT}" => EvixGemCheck::RB_SYS_CURRENT }
    .each do |branch, gems|
    context branch do
      it "builds with the cargo in $CARGO_HOME/bin when cargo is off PATH, never fetching a toolchain" do
        env = cargo_off_path
        build, out, ok = configure(gems, env)
        expect(ok).to be(true), out

        commands = dry_run(build, "all", env)
        expect(cargo_lines(commands).size).to eq(1), commands.join("\n")
        expect(cargo_lines(commands).first).to include("#{cargo_home}/bin/cargo", "--locked")
        expect(commands.join("\n")).not_to match(/toolchain|curl|rustup/)
      end

      it "builds with $CARGO, into $CARGO_TARGET_DIR, with $EVIX_CARGO_FLAGS" do
        cargo = File.join(@dir, "my-cargo")
        File.symlink(link_cargo_home, cargo)
        build, out, ok = configure(gems, "CARGO" => cargo)
        expect(ok).to be(true), out

        line = cargo_lines(dry_run(build, "all", "CARGO_TARGET_DIR" => "/tmp/shared-target",
                                                 "EVIX_CARGO_FLAGS" => "--offline -j1")).first
        expect(line).to include(cargo, "--locked", "--offline -j1")
        expect(line).to match(%r{(CARGO_TARGET_DIR="|--target-dir )/tmp/shared-target})
      end

      it "removes ./target after installing unless EVIX_KEEP_TARGET=1, and a named target dir never" do
        build, out, ok = configure(gems)
        expect(ok).to be(true), out
        removes_target = lambda do |commands|
          commands.any? { |command| command.start_with?(rm_rf) && command.split.include?("#{build}/target") }
        end

        expect(removes_target.call(dry_run(build, "install"))).to be(true)
        expect(dry_run(build, "install")).to include(a_string_matching(/\Arm -f evix\.\w+ \.sitearchdir\.time\z/))
        expect(removes_target.call(dry_run(build, "install", "EVIX_KEEP_TARGET" => "1"))).to be(false)
        expect(removes_target.call(dry_run(build, "clean"))).to be(true)
        %w[install clean].each do |target|
          commands = dry_run(build, target, "CARGO_TARGET_DIR" => "/tmp/shared-target")
          expect(commands.grep(/\A#{Regexp.escape(rm_rf)}.*shared-target/)).to eq([]), commands.join("\n")
        end
      end

      it "stops with a clear message when there is no cargo" do
        env = cargo_off_path.merge("CARGO_HOME" => File.join(@dir, "empty"))
        build, out, ok = configure(gems, env)

        expect(ok).to be(false)
        expect(out).to include("evix: cargo was not found", "install a Rust toolchain")
        expect(File.exist?(File.join(build, "Makefile"))).to be(false)
      end

      it "stops with a clear message when there is no libclang" do
        skip "extconf.rb looks for libclang on Linux and FreeBSD only" unless RUBY_PLATFORM.match?(/linux|freebsd/)
        build, out, ok = configure(gems, "LIBCLANG_PATH" => @dir)

        expect(ok).to be(false)
        expect(out).to include("evix: libclang was not found in LIBCLANG_PATH=#{@dir}", "libclang-dev")
        expect(File.exist?(File.join(build, "Makefile"))).to be(false)
      end
    end
  end

  it "lets rb_sys write the rules when it has the API extconf.rb uses" do
    build, out, ok = configure(EvixGemCheck::RB_SYS_CURRENT)

    expect(ok).to be(true), out
    expect(File.read(File.join(build, "Makefile"))).to include("rb_sys stand-in #{EvixGemCheck::RB_SYS_CURRENT}")
  end

  it "writes its own Makefile, saying why, when rb_sys is older than #{EvixGemCheck::RB_SYS_TOO_OLD.succ}" do
    build, out, ok = configure(EvixGemCheck::RB_SYS_TOO_OLD)

    expect(ok).to be(true), out
    expect(out).to include("rb_sys #{EvixGemCheck::RB_SYS_TOO_OLD} is older than 0.9.59")
    makefile = File.read(File.join(build, "Makefile"))
    expect(makefile).to include("evix: build the Rust crate with cargo")
    expect(makefile).not_to include("rb_sys stand-in")
  end
end
