# frozen_string_literal: true

require_relative "evix_build"

# A second Ruby for CI: Debian 13's Ruby 3.3 in a chroot built once into a
# cache outside the checkout. The host's ~/.cargo and ~/.rustup and the
# checkout are bind-mounted; the extension is built into lib/evix/3.3/ so the
# host's build is left alone.
module Compat
  SUITE = "trixie"
  # strace: a scheduler spec counts the reads a child process makes.
  PACKAGES = %w[ruby ruby-dev ruby-rspec rake bundler libclang-dev build-essential strace].freeze

  module_function

  def root
    ENV.fetch("EVIX_COMPAT_ROOT", File.join(Dir.home, ".cache", "evix", "debian-#{SUITE}"))
  end

  def sh!(*command)
    system(*command) || abort("compat: failed: #{command.join(" ")}")
  end

  # The marker lists the packages installed: a cache made before a package
  # was added gets it installed, not rebuilt.
  def build_root
    marker = File.join(root, ".evix-ready")
    return if File.exist?(marker) && File.read(marker).split == PACKAGES

    abort "compat: needs root (debootstrap, chroot, mount)" unless Process.uid.zero?
    unless File.exist?(marker)
      FileUtils.rm_rf(root)
      FileUtils.mkdir_p(root)
      sh!("debootstrap", "--variant=minbase", SUITE, root)
    end
    with_mounts(proc_dev_only: true) do
      sh!("chroot", root, "/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
          "--no-install-recommends", *PACKAGES)
    end
    File.write(marker, PACKAGES.join(" "))
  end

  def mounts
    [["/proc", "proc"], ["/dev", "dev"], [File.join(Dir.home, ".cargo"), "root/.cargo"],
     [File.join(Dir.home, ".rustup"), "root/.rustup"], [EvixBuild::ROOT, "evix"]]
  end

  def with_mounts(proc_dev_only: false)
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

  def script
    <<~SH
      set -e
      cd /evix
      export PATH=/root/.cargo/bin:$PATH CARGO_HOME=/root/.cargo RUSTUP_HOME=/root/.rustup
      export CARGO_TARGET_DIR=/evix/target/ruby33 RUBY=/usr/bin/ruby
      ruby -v
      cargo build --release --locked -p evix
      mkdir -p lib/evix/3.3 && rm -f lib/evix/3.3/evix.so
      cp target/ruby33/release/libevix.so lib/evix/3.3/evix.so
      rspec spec/evix spec/examples
    SH
  end
end

namespace :compat do
  desc "Compile and run the specs on Ruby 3.3 in a Debian 13 chroot (root only)"
  task :ruby33 do
    Compat.build_root
    # A clean environment: nothing of the host's bundle or Ruby leaks in.
    Compat.with_mounts do
      Compat.sh!("chroot", Compat.root, "/usr/bin/env", "-i", "HOME=/root", "LANG=C.UTF-8",
                 "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "/bin/bash", "-c", Compat.script)
    end
  end
end
