# frozen_string_literal: true

require "mkmf"
require_relative "version"

# The part of rb_sys's Makefile contract that ext/evix/extconf.rb relies on, written
# for evix's tests: `create_rust_makefile(target) { |config| ... }`, a config object
# with rb_sys's accessors (extra_cargo_args only from 0.9.59 on, as in rb_sys), and
# a Makefile that assigns CARGO, RB_SYS_CARGO_TARGET_DIR and RB_SYS_EXTRA_CARGO_ARGS
# with ?=, leaves a .sitearchdir.time, cleans $(CLEANLIBS) $(CLEANOBJS), and, like
# rb_sys, fetches a Rust toolchain when cargo is not on PATH at a RubyGems install
# unless told not to (here that step fails at once instead of downloading anything).
module RbSys
  # create_rust_makefile and its configuration.
  module Mkmf
    # What the block passed to create_rust_makefile may set.
    class Config
      attr_accessor :profile, :target_dir, :clean_after_install, :auto_install_rust_toolchain,
                    :force_install_rust_toolchain

      attr_accessor :extra_cargo_args if Gem::Version.new(VERSION) >= Gem::Version.new("0.9.59")

      def initialize
        @profile = :release
        @extra_cargo_args = [] if respond_to?(:extra_cargo_args)
        # rb_sys tells a RubyGems install by $SOURCE_DATE_EPOCH, which RubyGems sets.
        @clean_after_install = ENV.key?("SOURCE_DATE_EPOCH")
        @auto_install_rust_toolchain = true
        @force_install_rust_toolchain = false
      end

      # What RB_SYS_EXTRA_CARGO_ARGS starts as (rb_sys before 0.9.59 had none).
      def cargo_args
        respond_to?(:extra_cargo_args) ? extra_cargo_args : []
      end

      def fetch_toolchain?
        force_install_rust_toolchain ||
          (auto_install_rust_toolchain && ENV.key?("SOURCE_DATE_EPOCH") && find_executable("cargo").nil?)
      end
    end

    # Writes ./Makefile for the cdylib of package +target+'s last part, installed as
    # $(sitearchdir)/+target+.$(DLEXT).
    def create_rust_makefile(target)
      config = Config.new
      yield config if block_given?
      prefix, name = File.split(target)
      File.write("Makefile", configuration(File.dirname($PROGRAM_NAME)).join + stand_in_rules(config, name, prefix))
    end

    private

    def stand_in_rules(config, name, prefix)
      <<~MAKE
        #### rb_sys stand-in #{VERSION} ####
        CARGO ?= cargo
        RB_SYS_CARGO_TARGET_DIR ?= target
        RB_SYS_EXTRA_CARGO_ARGS ?= #{config.cargo_args.join(" ")}
        RB_SYS_CARGO_PROFILE = #{config.profile}
        TARGET = #{name}
        TARGET_NAME = #{name}
        target_prefix = /#{prefix}
        DLLIB = $(TARGET).#{RbConfig::CONFIG.fetch("DLEXT")}
        RUBYARCHDIR = $(sitearchdir)$(target_prefix)
        RUSTLIBDIR = $(RB_SYS_CARGO_TARGET_DIR)/release
        RUSTLIB = $(RUSTLIBDIR)/lib$(TARGET_NAME).#{RbConfig::CONFIG.fetch("SOEXT", "so")}
        CLEANLIBS = $(DLLIB) $(RUSTLIB)
        CLEANOBJS = $(RUSTLIBDIR)

        .PHONY: all install install-so gemclean clean FORCE
        FORCE:
        #{toolchain_rules(config)}
        $(RUSTLIB): FORCE
        \tRUBY="#{RbConfig.ruby}" $(CARGO) build $(RB_SYS_EXTRA_CARGO_ARGS) --profile $(RB_SYS_CARGO_PROFILE) --lib \\
        \t\t--manifest-path $(srcdir)/Cargo.toml --target-dir $(RB_SYS_CARGO_TARGET_DIR)

        $(DLLIB): $(RUSTLIB)
        \t$(COPY) "$(RUSTLIB)" $@

        .sitearchdir.time:
        \t$(MAKEDIRS) $(RUBYARCHDIR)
        \ttouch $@

        install-so: $(DLLIB) .sitearchdir.time
        \t$(INSTALL_PROG) $(DLLIB) $(RUBYARCHDIR)

        gemclean: install-so
        \t$(RM_RF) $(CLEANOBJS)

        install: #{config.clean_after_install ? "gemclean" : "install-so"}

        all: $(DLLIB)

        clean:
        \t-$(RM_RF) $(CLEANLIBS) $(CLEANOBJS) .*.time
      MAKE
    end

    def toolchain_rules(config)
      return "" unless config.fetch_toolchain?

      <<~MAKE
        CARGO := $(CURDIR)/.rb-sys/cargo/bin/cargo
        $(CARGO):
        \t@echo "rb_sys stand-in: here rb_sys would download a Rust toolchain with curl"; exit 127
        $(RUSTLIB): $(CARGO)
      MAKE
    end
  end
end

include RbSys::Mkmf # rubocop:disable Style/MixinUsage -- as rb_sys/mkmf does
