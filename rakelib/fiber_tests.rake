# frozen_string_literal: true

require "fileutils"
require_relative "evix_build"

# Ruby's own Fiber::Scheduler tests (test/fiber) against Evix::Scheduler, one
# lane per Ruby: 3.1 on the host, 3.3 and 3.4 in the chroots of the compat
# lanes (rakelib/compat.rake). The tests and Ruby's runner come from Debian's
# source package of the lane's Ruby, fetched once with apt-get (a private
# apt configuration: the host's sources are left alone) into a cache outside
# the checkout, ~/.cache/evix/ruby-sources (EVIX_FIBER_TESTS_CACHE moves it).
# spec/fiber_tests/run.rb runs them against the reference scheduler and
# against evix and fails if evix fails a test the reference passes.
module FiberTests
  # The source package and the suite whose deb-src has it, per lane. Debian's
  # registry keeps only some versions of a source package: the newest one
  # whose upstream version is the lane's x.y is taken, and printed.
  Source = Struct.new(:package, :suite, keyword_init: true)
  SOURCES = {
    "3.1" => Source.new(package: "ruby3.1", suite: "bookworm"),
    "3.3" => Source.new(package: "ruby3.3", suite: "trixie"),
    "3.4" => Source.new(package: "ruby3.4", suite: "experimental")
  }.freeze

  # What run.rb needs of a source tree: the tests, the runner and its libraries.
  KEEP = %w[test/fiber test/lib tool/test tool/lib].freeze

  module_function

  def cache
    ENV.fetch("EVIX_FIBER_TESTS_CACHE", File.join(Dir.home, ".cache", "evix", "ruby-sources"))
  end

  # The extracted tree of +version+'s source package (fetched on first use).
  def source(version)
    spec = SOURCES.fetch(version)
    existing = Dir[File.join(cache, "#{spec.package}-*", ".evix-ready")].max
    return File.dirname(existing) if existing

    fetch(spec)
  end

  def fetch(spec)
    apt = apt_command(spec)
    Compat.sh!(*apt, "-q", "update")
    listing = IO.popen(["apt-cache", *apt.drop(1), "showsrc", spec.package], &:read)
    versions = listing.scan(/^Version: (\S+)/).flatten.uniq
    versions = versions.sort { |a, b| system("dpkg", "--compare-versions", a, "gt", b) ? -1 : 1 }
    download = File.join(cache, "download")
    FileUtils.mkdir_p(download)
    version = versions.find do |candidate|
      Dir.chdir(download) { system(*apt, "source", "--download-only", "#{spec.package}=#{candidate}") }
    end or abort "fiber_tests: no #{spec.package} source package could be downloaded (#{versions.join(", ")})"
    puts "fiber_tests: #{spec.package} #{version}"
    extract(spec, version, download)
  end

  def extract(spec, version, download)
    dsc = File.join(download, "#{spec.package}_#{version.sub(/\A\d+:/, "")}.dsc")
    tree = File.join(cache, "#{spec.package}-#{version}")
    FileUtils.rm_rf([tree, "#{tree}.full"])
    Compat.sh!("dpkg-source", "-x", dsc, "#{tree}.full")
    KEEP.each do |part|
      next unless File.exist?(File.join("#{tree}.full", part))

      FileUtils.mkdir_p(File.dirname(File.join(tree, part)))
      FileUtils.cp_r(File.join("#{tree}.full", part), File.join(tree, part))
    end
    # (dpkg-source leaves a copy of the upstream tarball beside the tree.)
    FileUtils.rm_rf(["#{tree}.full", download, *Dir[File.join(cache, "*.orig.tar.*")]])
    File.write(File.join(tree, ".evix-ready"), version)
    tree
  end

  # apt-get with its own sources (one deb-src line), lists and cache under
  # the cache directory, so neither the host's apt state nor its sources
  # change. The registry's Release files may be older than their Valid-Until.
  def apt_command(spec)
    state = File.join(cache, "apt", spec.suite)
    FileUtils.mkdir_p([File.join(state, "lists", "partial"), File.join(state, "archives", "partial")])
    sources = File.join(state, "sources.list")
    File.write(sources, "deb-src http://deb.debian.org/debian #{spec.suite} main\n")
    ["apt-get", "-o", "Dir::Etc::SourceList=#{sources}", "-o", "Dir::Etc::SourceParts=/nonexistent",
     "-o", "Dir::State::Lists=#{state}/lists", "-o", "Dir::Cache=#{state}", "-o", "Dir::State::status=/dev/null",
     "-o", "Acquire::Check-Valid-Until=false", "-o", "APT::Sandbox::User=root"]
  end

  # The host lane: the host's Ruby and the extension `rake compile` built.
  def run_host
    tree = source("3.1")
    Compat.sh!(RbConfig.ruby, File.join(EvixBuild::ROOT, "spec/fiber_tests/run.rb"), tree)
  end

  # A chroot lane: the tree is copied into the chroot (which sees only the
  # checkout), then run.rb runs with the lane's Ruby and extension.
  def run_chroot(version)
    lane = Compat::LANES.fetch(version)
    tree = source(version)
    Compat.build_root(lane)
    inside = "/var/cache/evix-fiber-tests/#{File.basename(tree)}"
    FileUtils.rm_rf(File.join(lane.root, inside))
    FileUtils.mkdir_p(File.dirname(File.join(lane.root, inside)))
    FileUtils.cp_r(tree, File.join(lane.root, inside))
    Compat.run(lane, "#{lane.ruby} spec/fiber_tests/run.rb #{inside}")
  end
end

namespace :fiber_tests do
  desc "Ruby's test/fiber against the reference scheduler and Evix::Scheduler on the host's Ruby 3.1"
  task ruby31: :compile do
    FiberTests.run_host
  end

  desc "Ruby's test/fiber against the reference scheduler and Evix::Scheduler on Ruby 3.3 (chroot, root only)"
  task(:ruby33) { FiberTests.run_chroot("3.3") }

  desc "Ruby's test/fiber against the reference scheduler and Evix::Scheduler on Ruby 3.4 (chroot, root only)"
  task(:ruby34) { FiberTests.run_chroot("3.4") }
end

desc "Ruby's test/fiber on Ruby 3.1, 3.3 and 3.4 (see rakelib/fiber_tests.rake)"
task fiber_tests: %w[fiber_tests:ruby31 fiber_tests:ruby33 fiber_tests:ruby34]
