# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "tmpdir"
require_relative "../../rakelib/gem_check"

# What `gem build` packages, against EvixGemCheck's allow-list, and how that list
# judges an installed gem's tree (`rake gem:check` applies it to two real installs).
RSpec.describe "the evix gem's files" do
  root = EvixBuild::ROOT

  def build_gem(source_dir, into)
    gem_file = File.join(into, "evix.gem")
    EvixBuild.unbundled do
      EvixGemCheck.run!({}, "gem", "build", File.join(source_dir, "evix.gemspec"), "--output", gem_file,
                        chdir: source_dir)
    end
    EvixGemCheck.packaged_files(gem_file)
  end

  include_context "in a temporary directory"

  it "packages only allowed files from this checkout, and everything a build needs" do
    files = build_gem(root, @dir)

    expect(EvixGemCheck.packaging_problems(files)).to eq([])
    expect(files).to include("lib/evix.rb", "ext/evix/src/lib.rs", "Cargo.lock")
    expect(files.grep(%r{\Aspec/|\Abench/|\.so\z|/tests/|testing\.rs\z})).to eq([])
  end

  it "leaves out what builds and tests leave in a checkout" do
    source = File.join(@dir, "source")
    (%w[lib sig exe examples ext/evix/src] +
     %w[evix.gemspec Cargo.toml Cargo.lock README.md LICENSE ext/evix/extconf.rb ext/evix/Cargo.toml]).each do |path|
      FileUtils.mkdir_p(File.dirname(File.join(source, path)))
      FileUtils.cp_r(File.join(root, path), File.join(source, path))
    end
    strays = %w[ext/evix/.sitearchdir.time ext/evix/Makefile ext/evix/mkmf.log ext/evix/evix.so
                ext/evix/target/release/libevix.so ext/evix/target/release/build/evix-1/out/bindings.rs
                ext/evix/.rb-sys/stable/cargo/bin/cargo lib/evix/evix.so lib/evix/3.3/evix.so lib/evix/io/io.rb.orig
                spec/evix/loop/loop_spec.rb ext/evix/src/core/timers_test.rs ext/evix/src/ruby/tests.rs]
    strays.each do |path|
      FileUtils.mkdir_p(File.dirname(File.join(source, path)))
      File.write(File.join(source, path), "stray\n")
    end

    files = build_gem(source, @dir)

    expect(files & strays).to eq([])
    expect(EvixGemCheck.packaging_problems(files)).to eq([])
  end

  it "names each file the allow-list refuses, Rust tests and missing required files" do
    problems = EvixGemCheck.packaging_problems(
      %w[lib/evix.rb ext/evix/Makefile ext/evix/.sitearchdir.time ext/evix/src/core/tests/mod.rs
         ext/evix/src/sys/testing.rs ext/evix/target/release/libevix.so]
    )

    expect(problems).to include("ext/evix/Makefile: not allowed", "ext/evix/.sitearchdir.time: not allowed",
                                "ext/evix/target/release/libevix.so: not allowed",
                                "ext/evix/src/core/tests/mod.rs: Rust test code",
                                "ext/evix/src/sys/testing.rs: Rust test code", "Cargo.lock: missing")
    expect(problems.grep(%r{\Alib/evix\.rb})).to eq([])
  end

  describe "an installed gem's tree" do
    dlext = RbConfig::CONFIG.fetch("DLEXT")
    packaged = %w[lib/evix.rb ext/evix/extconf.rb ext/evix/src/lib.rs]

    def lay_out(base, paths)
      paths.each do |path|
        FileUtils.mkdir_p(File.dirname(File.join(base, path)))
        File.write(File.join(base, path), "x")
      end
    end

    def problems(packaged)
      EvixGemCheck.install_problems(gem_dir: File.join(@dir, "gem"), extension_dir: File.join(@dir, "ext"),
                                    packaged: packaged)
    end

    it "passes the packaged files, RubyGems' two copies of the library and the Makefile" do
      lay_out(File.join(@dir, "gem"), packaged + ["lib/evix/evix.#{dlext}", "ext/evix/Makefile"])
      lay_out(File.join(@dir, "ext"), ["evix/evix.#{dlext}", "gem.build_complete", "gem_make.out"])

      expect(problems(packaged)).to eq([])
    end

    it "names a third copy of the library, target/ and .sitearchdir.time, and a missing library" do
      lay_out(File.join(@dir, "gem"), packaged + ["ext/evix/evix.#{dlext}", "ext/evix/.sitearchdir.time",
                                                  "ext/evix/target/release/libevix.so"])
      lay_out(File.join(@dir, "ext"), ["gem.build_complete"])

      expect(problems(packaged).map { |line| line.delete_prefix(@dir) }).to contain_exactly(
        "/gem/ext/evix/evix.#{dlext}: left by the build", "/gem/ext/evix/.sitearchdir.time: left by the build",
        "/gem/ext/evix/target/release/libevix.so: left by the build", "/ext/evix/evix.#{dlext}: missing"
      )
    end
  end
end
