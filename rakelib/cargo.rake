# frozen_string_literal: true

require "fileutils"
require_relative "evix_build"

desc "Build the extension (cargo build --release) into lib/evix/evix.so"
task :compile do
  sh EvixBuild.cargo_env, EvixBuild.cargo, "build", "--release", "--locked", "-p", "evix"
  built = File.join(EvixBuild.target_dir, "release", EvixBuild.cargo_library_name)
  dest = EvixBuild.extension_path
  next if File.exist?(dest) && FileUtils.compare_file(built, dest)

  # Delete first, never overwrite in place: a process that has the old library
  # mapped would crash.
  rm_f dest
  cp built, dest
end

namespace :cargo do
  desc "Run the Rust core's tests (without the ruby feature)"
  task :test do
    sh EvixBuild.cargo_env, EvixBuild.cargo, "test", "--locked", "-p", "evix", "--no-default-features"
  end

  desc "Run clippy with and without the ruby feature, warnings as errors"
  task :clippy do
    sh EvixBuild.cargo_env, EvixBuild.cargo, "clippy", "--locked", "--all-targets", "--", "-D", "warnings"
    sh EvixBuild.cargo_env, EvixBuild.cargo, "clippy", "--locked", "--all-targets", "--no-default-features",
       "--", "-D", "warnings"
  end

  desc "Check Rust formatting (cargo fmt --check)"
  task :fmt do
    sh EvixBuild.cargo, "fmt", "--all", "--", "--check"
  end
end
