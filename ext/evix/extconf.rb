# frozen_string_literal: true

# Builds the evix native extension: the Rust crate next to this file, a cdylib that
# exports Init_evix, installed as $(RUBYARCHDIR)/evix.$(DLEXT) (RUBYARCHDIR is
# $(sitearchdir)/evix, so `require "evix/evix"` finds it).
#
# With the rb_sys gem installed, rb_sys writes the Makefile. Without it (Debian's
# Ruby, no RubyGems.org), this file writes one that runs cargo itself. RubyGems
# runs `make clean`, `make`, `make install DESTDIR=` here, after pointing
# sitearchdir/sitelibdir at its own staging directory through RbConfig; the
# Makefile below takes those from mkmf's `configuration`, so DESTDIR,
# sitearchdir, sitelibdir and RUBYARCHDIR given on the make command line win.
#
# Environment:
#   CARGO             cargo to run (else `cargo` on PATH, else ~/.cargo/bin/cargo)
#   CARGO_TARGET_DIR  cargo's target dir (default: ./target in the build dir,
#                     removed again by `make install` unless EVIX_KEEP_TARGET=1)
#   EVIX_NO_RB_SYS=1  write the plain Makefile even when rb_sys is installed
#   EVIX_CARGO_FLAGS  extra arguments for `cargo build`

require "mkmf"
require "rbconfig"

EVIX_CRATE_DIR = File.expand_path(__dir__)

def evix_rb_sys_available?
  return false if ENV["EVIX_NO_RB_SYS"] == "1"

  require "rb_sys/mkmf"
  true
rescue LoadError
  false
end

def evix_find_cargo
  from_env = ENV.fetch("CARGO", "")
  return from_env unless from_env.empty?

  on_path = find_executable("cargo")
  return on_path if on_path

  cargo_home = ENV.fetch("CARGO_HOME") { File.join(Dir.home, ".cargo") }
  candidate = File.join(cargo_home, "bin", "cargo")
  return candidate if File.executable?(candidate)

  abort <<~MSG
    evix: cargo was not found (looked at $CARGO, PATH and #{candidate}).
    evix's extension is written in Rust: install a Rust toolchain (https://rustup.rs)
    and run the installation again.
  MSG
rescue ArgumentError # Dir.home without HOME
  abort "evix: cargo was not found on PATH and HOME is not set; set CARGO=/path/to/cargo"
end

# File name cargo gives the cdylib of package "evix" on this platform.
def evix_cargo_library_name
  case RbConfig::CONFIG["host_os"]
  when /darwin/ then "libevix.dylib"
  when /mswin|mingw|cygwin/ then "evix.dll"
  else "libevix.#{RbConfig::CONFIG.fetch("SOEXT", "so")}"
  end
end

# Rules appended to mkmf's configuration section (which defines DESTDIR, sitearchdir,
# sitelibdir, RM, COPY, INSTALL_PROG, MAKEDIRS, Q, ECHO, ...).
EVIX_MAKEFILE_RULES = <<~MAKE
  #### evix: build the Rust crate with cargo ####

  CARGO = @CARGO@
  EVIX_RUBY = @RUBY@
  CARGO_MANIFEST = @CARGO_MANIFEST@
  EVIX_DEFAULT_TARGET_DIR = $(CURDIR)/target
  CARGO_TARGET_DIR ?= $(EVIX_DEFAULT_TARGET_DIR)
  CARGO_PROFILE_DIR = $(CARGO_TARGET_DIR)/$(if $(CARGO_BUILD_TARGET),$(CARGO_BUILD_TARGET)/)release
  CARGO_LIB = @CARGO_LIB@
  EVIX_CARGO_FLAGS ?=
  EVIX_KEEP_TARGET ?=

  TARGET = evix
  DLEXT = @DLEXT@
  DLLIB = $(TARGET).$(DLEXT)
  target_prefix = /evix
  RUBYARCHDIR = $(sitearchdir)$(target_prefix)
  RUBYLIBDIR = $(sitelibdir)$(target_prefix)

  .PHONY: all install install-so install-rb site-install clean distclean realclean static FORCE

  all: $(DLLIB)

  static: all

  # cargo decides what is stale, so always ask it. The old library is deleted
  # before the new one is copied: overwriting a loaded .so in place crashes the
  # processes that have it mapped.
  $(DLLIB): FORCE
  \t$(ECHO) cargo build --release --locked
  \t$(Q) RUBY="$(EVIX_RUBY)" CARGO_TARGET_DIR="$(CARGO_TARGET_DIR)" \\
  \t\t"$(CARGO)" build --release --locked --manifest-path "$(CARGO_MANIFEST)" $(EVIX_CARGO_FLAGS)
  \t$(Q) $(RM) $(DLLIB)
  \t$(Q) $(COPY) "$(CARGO_PROFILE_DIR)/$(CARGO_LIB)" $(DLLIB)

  install: install-so install-rb

  site-install: install

  install-rb:

  install-so: $(DLLIB)
  \t$(ECHO) installing $(DLLIB) to $(RUBYARCHDIR)
  \t$(Q) $(MAKEDIRS) "$(RUBYARCHDIR)"
  \t$(Q) $(RM) "$(RUBYARCHDIR)/$(DLLIB)"
  \t$(Q) $(INSTALL_PROG) $(DLLIB) "$(RUBYARCHDIR)/$(DLLIB)"
  \t$(Q) if [ "$(CARGO_TARGET_DIR)" = "$(EVIX_DEFAULT_TARGET_DIR)" ] && [ "$(EVIX_KEEP_TARGET)" != 1 ]; then \\
  \t\t$(RM_RF) "$(EVIX_DEFAULT_TARGET_DIR)"; fi

  clean:
  \t$(Q) $(RM) $(DLLIB)
  \t$(Q) $(RM_RF) "$(EVIX_DEFAULT_TARGET_DIR)"

  distclean realclean: clean
  \t$(Q) $(RM) Makefile mkmf.log

  FORCE:
MAKE

def evix_write_cargo_makefile
  values = {
    "@CARGO@" => evix_find_cargo,
    "@RUBY@" => RbConfig.ruby,
    "@CARGO_MANIFEST@" => File.join(EVIX_CRATE_DIR, "Cargo.toml"),
    "@CARGO_LIB@" => evix_cargo_library_name,
    "@DLEXT@" => RbConfig::CONFIG.fetch("DLEXT")
  }
  # Make expands "$"; the recipes double-quote every path for the shell.
  rules = EVIX_MAKEFILE_RULES.gsub(/@[A-Z_]+@/) { |key| values.fetch(key).gsub("$", "$$") }
  File.write("Makefile", "#{configuration(EVIX_CRATE_DIR).join}\n#{rules}")
end

if evix_rb_sys_available?
  create_rust_makefile("evix/evix") do |r|
    r.profile = ENV.fetch("RB_SYS_CARGO_PROFILE", :release).to_sym
    r.extra_cargo_args += ["--locked"]
  end
else
  evix_write_cargo_makefile
end
