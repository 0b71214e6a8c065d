# frozen_string_literal: true

require_relative "evix_build"

# More Rubies for CI, each in a Debian chroot built once into a cache outside
# the checkout: Ruby 3.3 from Debian 13 (trixie), Ruby 3.4 from Debian
# experimental on a sid base. The host's ~/.cargo and ~/.rustup and the
# checkout are bind-mounted; the extension is built into lib/evix/<x.y>/ so
# the host's build is left alone (lib/evix.rb loads that one first).
module Compat
  # A Ruby lane: +suite+ is debootstrapped; +experimental+ adds Debian
  # experimental to its sources and installs +ruby_packages+ from there.
  Lane = Struct.new(:version, :suite, :ruby, :ruby_packages, :experimental, keyword_init: true) do
    # strace: a scheduler spec counts the reads a child process makes; openssl, curl and
    # redis-tools: the server kit's specs use them as real clients.
    def packages
      ruby_packages + %w[ruby-rspec libclang-dev build-essential strace openssl curl redis-tools]
    end

    # EVIX_COMPAT_ROOT_33, EVIX_COMPAT_ROOT_34 move a lane's cache.
    def root
      name = experimental ? "debian-#{suite}-experimental" : "debian-#{suite}"
      ENV.fetch("EVIX_COMPAT_ROOT_#{version.delete(".")}", File.join(Dir.home, ".cache", "evix", name))
    end
  end

  LANES = {
    "3.3" => Lane.new(version: "3.3", suite: "trixie", ruby: "/usr/bin/ruby",
                      ruby_packages: %w[ruby ruby-dev rake bundler], experimental: false),
    "3.4" => Lane.new(version: "3.4", suite: "sid", ruby: "/usr/bin/ruby3.4",
                      ruby_packages: %w[ruby3.4 ruby3.4-dev], experimental: true)
  }.freeze

  # The registry's copy of sid's and experimental's Release files may be
  # older than their Valid-Until.
  APT = %w[apt-get -o Acquire::Check-Valid-Until=false].freeze

  module_function

  def sh!(*command)
    system(*command) || abort("compat: failed: #{command.join(" ")}")
  end

  # The marker lists the packages installed: a cache made before a package
  # was added gets it installed, not rebuilt.
  def build_root(lane)
    root = lane.root
    marker = File.join(root, ".evix-ready")
    return if File.exist?(marker) && File.read(marker).split.sort == lane.packages.sort

    abort "compat: needs root (debootstrap, chroot, mount)" unless Process.uid.zero?
    unless File.exist?(marker)
      FileUtils.rm_rf(root)
      FileUtils.mkdir_p(root)
      sh!("debootstrap", "--variant=minbase", lane.suite, root)
    end
    with_mounts(root, proc_dev_only: true) { install(lane) }
    File.write(marker, lane.packages.join(" "))
  end

  def install(lane)
    apt = ["chroot", lane.root, "/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", *APT]
    install = [*apt, "install", "-y", "-q", "--no-install-recommends"]
    if lane.experimental
      File.write(File.join(lane.root, "etc/apt/sources.list.d/experimental.list"),
                 "deb http://deb.debian.org/debian experimental main\n")
      sh!(*apt, "-q", "update")
      sh!(*install, "-t", "experimental", *lane.ruby_packages)
    end
    sh!(*install, *lane.packages)
  end

  def mounts
    [["/proc", "proc"], ["/dev", "dev"], [File.join(Dir.home, ".cargo"), "root/.cargo"],
     [File.join(Dir.home, ".rustup"), "root/.rustup"], [EvixBuild::ROOT, "evix"]]
  end

  # A minbase chroot has no /etc/hosts: the host's is copied in.
  def with_mounts(root, proc_dev_only: false)
    mounted = []
    list = proc_dev_only ? mounts.first(2) : mounts
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

  def script(lane)
    target = "/evix/target/ruby#{lane.version.delete(".")}"
    <<~SH
      set -e
      cd /evix
      export PATH=/root/.cargo/bin:$PATH CARGO_HOME=/root/.cargo RUSTUP_HOME=/root/.rustup
      export CARGO_TARGET_DIR=#{target} RUBY=#{lane.ruby}
      #{lane.ruby} -v
      cargo build --release --locked -p evix
      mkdir -p lib/evix/#{lane.version} && rm -f lib/evix/#{lane.version}/evix.so
      cp #{target}/release/libevix.so lib/evix/#{lane.version}/evix.so
      #{lane.ruby} -S rspec spec/evix spec/examples
    SH
  end

  def run(lane)
    build_root(lane)
    # A clean environment: nothing of the host's bundle or Ruby leaks in.
    with_mounts(lane.root) do
      sh!("chroot", lane.root, "/usr/bin/env", "-i", "HOME=/root", "LANG=C.UTF-8",
          "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "/bin/bash", "-c", script(lane))
    end
  end
end

namespace :compat do
  desc "Compile and run the specs on Ruby 3.3 in a Debian 13 chroot (root only)"
  task(:ruby33) { Compat.run(Compat::LANES.fetch("3.3")) }

  desc "Compile and run the specs on Ruby 3.4 (Debian experimental) in a sid chroot (root only)"
  task(:ruby34) { Compat.run(Compat::LANES.fetch("3.4")) }
end
