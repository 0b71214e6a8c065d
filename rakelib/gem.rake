# frozen_string_literal: true

require "rbconfig"
require "rubygems/package"
require "tmpdir"
require_relative "evix_build"

namespace :gem do
  desc "Build pkg/evix-VERSION.gem"
  task :build do
    mkdir_p "pkg"
    sh "gem", "build", "evix.gemspec", "--output", "pkg/evix-#{EvixBuild.version}.gem"
  end

  desc "Build the gem, install it into a scratch GEM_HOME (compiling the extension from " \
       "the packaged files) and load it from there"
  task :check do
    EvixBuild.unbundled do
      Dir.mktmpdir("evix-gem-check-") do |dir|
        gem_file = File.join(dir, "evix-#{EvixBuild.version}.gem")
        sh "gem", "build", "evix.gemspec", "--output", gem_file

        unpackaged = Gem::Package.new(gem_file).contents.grep(%r{\A(spec|bench|target|tmp)/|\.(so|bundle|dll)\z})
        abort "gem:check: these files must not be in the gem: #{unpackaged.join(", ")}" unless unpackaged.empty?

        gem_home = File.join(dir, "gems")
        # The extension's Makefile honours CARGO_TARGET_DIR: keep compiled
        # dependencies between runs, the evix crate itself is rebuilt every time
        # (its path differs). EVIX_GEM_CHECK_COLD=1 builds like a user's install.
        cargo_target = ENV["EVIX_GEM_CHECK_COLD"] == "1" ? nil : File.join(EvixBuild::ROOT, "tmp", "gem-check-target")
        env = { "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYLIB" => nil, "RUBYOPT" => nil,
                "CARGO_TARGET_DIR" => cargo_target }
        sh env, "gem", "install", "--local", "--no-document", "--install-dir", gem_home,
           "./#{File.basename(gem_file)}", chdir: dir

        script = 'p Evix::Loop.new.backend; puts $LOADED_FEATURES.grep(%r{/evix/evix\.\w+\z})'
        cmd = [RbConfig.ruby, "-revix", "-e", script]
        puts "GEM_HOME=#{gem_home} #{cmd.join(" ")}"
        out = IO.popen(env, cmd, chdir: dir, &:read)
        backend, extension = out.lines.map(&:chomp)
        unless Process.last_status.success? && backend&.match?(/\A:[a-z]\w*\z/) &&
               extension&.start_with?(gem_home)
          abort "gem:check: expected a backend Symbol and an extension loaded from #{gem_home}, got:\n#{out}"
        end
        puts "gem:check: OK: the installed gem loads (backend #{backend}, extension #{extension})"
      end
    end
  end
end
