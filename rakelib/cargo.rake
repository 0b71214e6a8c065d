# frozen_string_literal: true

require "fileutils"
require "json"
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

  desc "Run the Rust core's test binary (debug, overflow checks) under valgrind memcheck"
  task :valgrind do
    args = ["test", "--locked", "-p", "evix", "--no-default-features", "--no-run", "--message-format=json"]
    out = IO.popen(EvixBuild.cargo_env, [EvixBuild.cargo, *args], &:read)
    abort "cargo test --no-run failed" unless Process.last_status.success?
    binary = out.lines.map { |line| JSON.parse(line) }
                .find { |msg| msg["executable"] && msg.dig("target", "name") == "evix" }
                &.fetch("executable")
    abort "no test binary found" unless binary
    # Fewer random cases: valgrind runs the binary about 50 times slower.
    sh({ "EVIX_PROPTEST_CASES" => "16" }, "valgrind", "--quiet", "--error-exitcode=1", "--leak-check=full",
       "--errors-for-leak-kinds=definite", "--trace-children=no", binary, "--test-threads=1")
  end

  desc "Check Rust formatting (cargo fmt --check)"
  task :fmt do
    sh EvixBuild.cargo, "fmt", "--all", "--", "--check"
  end
end
