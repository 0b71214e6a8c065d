# frozen_string_literal: true

require_relative "evix_build"

# More Rubies, each in a Debian chroot built once into a cache outside the
# checkout: for the suite, Ruby 3.3 from Debian 13 (trixie) and Ruby 3.4 from
# Debian experimental on a sid base; for the benchmark, sid's Ruby 3.3 with
# today's peers (async 2, io-event, nio4r, puma), in that same sid chroot. The
# host's ~/.cargo and ~/.rustup and the checkout are bind-mounted; the
# extension is built into lib/evix/<x.y>/ so the host's build is left alone
# (lib/evix.rb loads that one first).
module Compat
  # A lane: +suite+ is debootstrapped (sid with Debian experimental in its
  # sources); +packages+ come from the suite, +experimental+ ones from
  # experimental. Lanes on one suite share its chroot.
  # strace: a scheduler spec counts the reads a child process makes; openssl, curl and
  # redis-tools: the server kit's specs use them as real clients.
  COMMON_PACKAGES = %w[ruby-rspec libclang-dev build-essential strace openssl curl redis-tools].freeze

  Lane = Struct.new(:name, :version, :suite, :ruby, :packages, :experimental, keyword_init: true) do
    def all_packages
      packages + experimental + COMMON_PACKAGES
    end

    def sid?
      suite == "sid"
    end

    # EVIX_COMPAT_ROOT_TRIXIE, EVIX_COMPAT_ROOT_SID move a chroot's cache.
    def root
      dir = sid? ? "debian-sid-experimental" : "debian-#{suite}"
      ENV.fetch("EVIX_COMPAT_ROOT_#{suite.upcase}", File.join(Dir.home, ".cache", "evix", dir))
    end

    # Where cargo builds for this lane (chroots differ in libc and libruby).
    def target
      "/evix/target/#{name}"
    end
  end

  LANES = {
    "3.3" => Lane.new(name: "ruby33", version: "3.3", suite: "trixie", ruby: "/usr/bin/ruby",
                      packages: %w[ruby ruby-dev rake bundler], experimental: []),
    # The Rack app specs (spec/evix/http/apps): Rack 3.2, rackup 2, Sinatra 4 and ab. sid builds
    # its native gems (pg, nokogiri for Rails, puma) for Ruby 3.3 only: the Rails and
    # PostgreSQL apps run in the apps lane below.
    "3.4" => Lane.new(name: "ruby34", version: "3.4", suite: "sid", ruby: "/usr/bin/ruby3.4",
                      packages: %w[ruby-rack ruby-rackup ruby-sinatra apache2-utils],
                      experimental: %w[ruby3.4 ruby3.4-dev])
  }.freeze

  # The Rack servers and apps the HTTP benchmark and the app specs run: puma 8, thin 2,
  # async-http 0.105 with protocol-rack 0.23 (and what Falcon's sources need besides:
  # async-service, async-container, samovar, localhost), Sinatra 4, an API-only Rails 7.2
  # (railties and actionpack), ruby-pg 1.7 with a PostgreSQL to start, ab.
  RACK_PACKAGES = %w[ruby-rack ruby-rackup ruby-sinatra ruby-railties ruby-actionpack ruby-pg postgresql
                     apache2-utils puma thin ruby-async-http ruby-protocol-rack ruby-async-service
                     ruby-async-container ruby-samovar ruby-localhost].freeze

  BENCH = Lane.new(name: "bench33", version: "3.3", suite: "sid", ruby: "/usr/bin/ruby",
                   packages: %w[ruby ruby-dev ruby-async ruby-io-event ruby-io-stream ruby-nio4r ruby-eventmachine
                                ruby-timers ruby-benchmark-ips wrk valgrind] + RACK_PACKAGES,
                   experimental: [])

  # The registry's copy of sid's and experimental's Release files may be
  # older than their Valid-Until.
  APT = %w[apt-get -o Acquire::Check-Valid-Until=false].freeze

  module_function

  def sh!(*command)
    system(*command) || abort("compat: failed: #{command.join(" ")}")
  end

  # The chroot exists once debootstrap finished; each lane's marker lists the
  # packages it installed there, so a package added later gets installed, not
  # the chroot rebuilt.
  def build_root(lane)
    root = lane.root
    base = File.join(root, ".evix-base")
    marker = File.join(root, ".evix-ready-#{lane.name}")
    return if File.exist?(marker) && File.read(marker).split.sort == lane.all_packages.sort

    abort "compat: needs root (debootstrap, chroot, mount)" unless Process.uid.zero?
    # (.evix-ready: a cache made before lanes shared a chroot.)
    unless File.exist?(base) || File.exist?(File.join(root, ".evix-ready"))
      FileUtils.rm_rf(root)
      FileUtils.mkdir_p(root)
      sh!("debootstrap", "--variant=minbase", lane.suite, root)
      File.write(base, lane.suite)
    end
    with_mounts(root, proc_dev_only: true) { install(lane) }
    File.write(marker, lane.all_packages.join(" "))
  end

  def install(lane)
    apt = ["chroot", lane.root, "/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", *APT]
    install = [*apt, "install", "-y", "-q", "--no-install-recommends"]
    if lane.sid?
      File.write(File.join(lane.root, "etc/apt/sources.list.d/experimental.list"),
                 "deb http://deb.debian.org/debian experimental main\n")
    end
    sh!(*apt, "-q", "update")
    sh!(*install, "-t", "experimental", *lane.experimental) unless lane.experimental.empty?
    sh!(*install, *lane.packages, *COMMON_PACKAGES)
  end

  def mounts
    [["/proc", "proc"], ["/dev", "dev"], [File.join(Dir.home, ".cargo"), "root/.cargo"],
     [File.join(Dir.home, ".rustup"), "root/.rustup"], [EvixBuild::ROOT, "evix"]]
  end

  # A minbase chroot has no /etc/hosts: the host's is copied in. +extra+:
  # more [host directory, path in the chroot] pairs.
  def with_mounts(root, proc_dev_only: false, extra: [])
    mounted = []
    list = proc_dev_only ? mounts.first(2) : mounts + extra
    list.each do |source, target|
      path = File.join(root, target)
      FileUtils.mkdir_p(path)
      sh!("mount", "--bind", source, path)
      mounted << path
    end
    %w[/etc/resolv.conf /etc/hosts].each { |file| FileUtils.cp(file, File.join(root, file)) }
    yield
  ensure
    mounted.reverse_each { |path| system("umount", "-l", path) }
  end

  # Builds the extension for the lane's Ruby, then runs +command+ (a shell line) with it.
  def script(lane, command)
    <<~SH
      set -e
      cd /evix
      export PATH=/root/.cargo/bin:$PATH CARGO_HOME=/root/.cargo RUSTUP_HOME=/root/.rustup
      export CARGO_TARGET_DIR=#{lane.target} RUBY=#{lane.ruby}
      #{lane.ruby} -v
      cargo build --release --locked -p evix
      mkdir -p lib/evix/#{lane.version} && rm -f lib/evix/#{lane.version}/evix.so
      cp #{lane.target}/release/libevix.so lib/evix/#{lane.version}/evix.so
      #{command}
    SH
  end

  # Runs +command+ in the lane's chroot, in a clean environment (nothing of
  # the host's bundle or Ruby leaks in) plus +env+, with the +mounts+ added.
  def run(lane, command = "#{lane.ruby} -S rspec spec/evix spec/examples", env: {}, mounts: [])
    build_root(lane)
    with_mounts(lane.root, extra: mounts) do
      sh!("chroot", lane.root, "/usr/bin/env", "-i", "HOME=/root", "LANG=C.UTF-8",
          "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env.map { |k, v| "#{k}=#{v}" },
          "/bin/bash", "-c", script(lane, command))
    end
  end
end

namespace :compat do
  desc "Compile and run the specs on Ruby 3.3 in a Debian 13 chroot (root only)"
  task(:ruby33) { Compat.run(Compat::LANES.fetch("3.3")) }

  desc "Compile and run the specs on Ruby 3.4 (Debian experimental) in a sid chroot (root only)"
  task(:ruby34) { Compat.run(Compat::LANES.fetch("3.4")) }

  desc "Run the Rack app specs (Sinatra 4, Rails 7.2, PostgreSQL with ruby-pg 1.7) on sid's Ruby 3.3, " \
       "the benchmark's chroot (root only). EVIX_APP_SERVER=puma|thin runs them against that server instead"
  task :apps do
    env = ENV.slice("EVIX_APP_SERVER")
    Compat.run(Compat::BENCH, "#{Compat::BENCH.ruby} -S rspec spec/evix/http/apps", env: env)
  end
end
