# frozen_string_literal: true

require "rake/clean"
require_relative "evix_build"
require_relative "ri_doc"

# The API reference: YARD (Debian's yard package) reads what .yardopts lists,
# lib/ and docs/api/native.rb (the methods the Rust extension defines). yard is
# a system gem outside the bundle, so it runs outside `bundle exec`'s
# environment.
CLEAN.include("doc", ".yardoc", "docs/api/ri")

# Runs yard with +args+ outside the bundle; returns its output (stderr too) and status.
def evix_yard(*args)
  out = EvixBuild.unbundled { IO.popen(["yard", *args], err: %i[child out], chdir: EvixBuild::ROOT, &:read) }
  [out, Process.last_status]
rescue Errno::ENOENT
  abort "yard is not installed: run bin/setup (Debian's yard package)"
end

desc "Build the API reference into doc/ (YARD; open doc/index.html)"
task :doc do
  out, status = evix_yard("doc")
  puts out
  abort "doc: yard failed" unless status.success?
end

namespace :doc do
  desc "Fail unless `yard stats` finds every public class, module, constant and method documented, " \
       "and YARD understood every comment (no warnings)"
  task :check do
    out, status = evix_yard("stats", "--list-undoc", "--no-save", "--fail-on-warning")
    puts out
    abort "doc:check: YARD warned about the comments above" unless status.success?
    abort "doc:check: the objects listed above have no comment" unless out.include?("100.00% documented")
  end

  desc "Render docs/api/native.rb into RDoc markup for ri (#{EvixRiDoc::TARGET}, which the gem ships)"
  task :ri do
    puts "doc:ri: wrote #{EvixRiDoc.write}"
  end

  desc "Check docs/api/native.rb against the compiled extension: its classes, constants and methods (visibility, arity)"
  task native: :compile do
    EvixBuild.unbundled { sh FileUtils::RUBY, "-Ilib", "rakelib/doc_native_check.rb" }
  end
end
