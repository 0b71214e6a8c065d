# frozen_string_literal: true

# Builds the evix native extension: the Rust crate next to this file, a cdylib that
# exports Init_evix, installed as $(RUBYARCHDIR)/evix.$(DLEXT) (RUBYARCHDIR is
# $(sitearchdir)/evix, so `require "evix/evix"` finds it).
#
# Needs cargo (a Rust toolchain) and libclang (rb-sys generates Ruby's bindings with
# bindgen); without either this file stops with a message saying what to install.
#
# With the rb_sys gem (0.9.59 or newer, EVIX_MIN_RB_SYS) installed, rb_sys writes the build
# rules; otherwise (no rb_sys, an older one, EVIX_NO_RB_SYS=1) this file writes them
# and runs cargo itself. Either way the Makefile starts with evix's settings and ends
# with evix's clean-up, so both builds find cargo the same way, never download a
# toolchain, honour the variables below and leave nothing behind but the Makefile.
# RubyGems runs `make clean`, `make`, `make install DESTDIR=` here, after pointing
# sitearchdir/sitelibdir at its own staging directory through RbConfig; values given
# on the make command line win. RubyGems 3.4 and later run `make clean` once more
# after the install, and fail it if the Makefile is gone: so the Makefile stays.
#
# Environment (read by make, so `make VAR=...` works too, except CARGO):
#   CARGO             cargo to run (else `cargo` on PATH, else $CARGO_HOME/bin/cargo,
#                     CARGO_HOME defaulting to ~/.cargo); looked up here, once
#   CARGO_TARGET_DIR  cargo's target dir (default: ./target in the build dir,
#                     removed again by `make install` unless EVIX_KEEP_TARGET=1;
#                     a directory you name is never removed, not even by `make clean`)
#   EVIX_NO_RB_SYS=1  write the plain Makefile even when rb_sys is installed
#   EVIX_CARGO_FLAGS  extra arguments for cargo
#   LIBCLANG_PATH     where libclang is (as bindgen reads it: only there, if set)

require "mkmf"
require "rbconfig"

EVIX_CRATE_DIR = File.expand_path(__dir__)

# The oldest rb_sys whose Makefile API this file uses (extra_cargo_args,
# auto_install_rust_toolchain, clean_after_install, CARGO and
# RB_SYS_CARGO_TARGET_DIR assigned with ?=).
EVIX_MIN_RB_SYS = "0.9.59"

# true when a usable rb_sys is installed (and loaded); says why when one is not used.
def evix_use_rb_sys?
  return false if ENV["EVIX_NO_RB_SYS"] == "1"

  require "rb_sys/version"
  if Gem::Version.new(RbSys::VERSION) < Gem::Version.new(EVIX_MIN_RB_SYS)
    message "evix: rb_sys #{RbSys::VERSION} is older than #{EVIX_MIN_RB_SYS}; building with evix's own Makefile\n"
    return false
  end
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

# Where bindgen (clang-sys) looks for libclang on Linux and FreeBSD, in its order:
# only $LIBCLANG_PATH when set, else llvm-config's prefix, the linker's library
# paths and the usual system directories.
def evix_libclang_dirs
  return [ENV["LIBCLANG_PATH"]] if ENV["LIBCLANG_PATH"]

  prefix = evix_llvm_prefix
  dirs = prefix ? %w[bin lib lib64].map { |sub| File.join(prefix, sub) } : []
  dirs += %w[LD_LIBRARY_PATH LIBRARY_PATH].flat_map { |var| ENV.fetch(var, "").split(File::PATH_SEPARATOR) }
  dirs + Dir.glob(%w[/usr/local/llvm*/lib* /usr/local/lib*/*/* /usr/local/lib*/* /usr/local/lib* /usr/lib*/*/*
                     /usr/lib*/* /usr/lib*])
end

# `llvm-config --prefix`, or nil without a working llvm-config.
def evix_llvm_prefix
  out = IO.popen([ENV.fetch("LLVM_CONFIG_PATH", "llvm-config"), "--prefix"], err: File::NULL, &:read).strip
  out unless out.empty? || !Process.last_status.success?
rescue SystemCallError
  nil
end

# Stops with a clear message where bindgen would fail later with a long one. Only on
# the systems whose search this mirrors; elsewhere the build says it itself.
def evix_check_libclang
  return unless RbConfig::CONFIG["host_os"].match?(/linux|freebsd/)

  checking_for("libclang") do
    evix_libclang_dirs.any? do |dir|
      Dir.glob(%w[libclang.so libclang-*.so libclang.so.* libclang-*.so.*], base: dir)
         .any? { |name| !name.include?("-cpp.") }
    end
  end || abort(<<~MSG)
    evix: libclang was not found#{" in LIBCLANG_PATH=#{ENV["LIBCLANG_PATH"]}" if ENV["LIBCLANG_PATH"]}.
    rb-sys generates Ruby's bindings with bindgen, which loads libclang: install it
    (Debian/Ubuntu: apt install libclang-dev; Fedora: dnf install clang-devel) or set
    LIBCLANG_PATH to the directory that holds libclang.so, and run the installation again.
  MSG
end

# File name cargo gives the cdylib of package "evix" on this platform.
def evix_cargo_library_name
  case RbConfig::CONFIG["host_os"]
  when /darwin/ then "libevix.dylib"
  when /mswin|mingw|cygwin/ then "evix.dll"
  else "libevix.#{RbConfig::CONFIG.fetch("SOEXT", "so")}"
  end
end

# First in every Makefile. rb_sys assigns CARGO and RB_SYS_CARGO_TARGET_DIR with ?=,
# so these win over its defaults ("cargo" on PATH, ./target).
EVIX_SETTINGS = <<~MAKE
  #### evix: settings (ext/evix/extconf.rb) ####

  CARGO = @CARGO@
  EVIX_DEFAULT_TARGET_DIR = $(CURDIR)/target
  CARGO_TARGET_DIR ?= $(EVIX_DEFAULT_TARGET_DIR)
  RB_SYS_CARGO_TARGET_DIR = $(CARGO_TARGET_DIR)
  EVIX_CARGO_FLAGS ?=
  EVIX_KEEP_TARGET ?=

MAKE

# Last in every Makefile: what `make clean` and `make install` remove. A target dir
# the user named is theirs (shared between builds), so only the default one goes.
EVIX_CLEAN_UP = <<~MAKE

  #### evix: clean-up (ext/evix/extconf.rb) ####

  ifeq ($(CARGO_TARGET_DIR),$(EVIX_DEFAULT_TARGET_DIR))
  EVIX_OWN_TARGET_DIR = $(EVIX_DEFAULT_TARGET_DIR)
  endif
  ifneq ($(EVIX_KEEP_TARGET),1)
  EVIX_INSTALL_REMOVES = $(EVIX_OWN_TARGET_DIR)
  endif

  # mkmf's and rb_sys's `clean` remove $(CLEANLIBS) $(CLEANOBJS); rb_sys's would
  # take $(CARGO_TARGET_DIR)/release with it.
  CLEANLIBS = $(DLLIB)
  CLEANOBJS = $(EVIX_OWN_TARGET_DIR)

  .PHONY: evix-clean-up
  install: evix-clean-up

  # After the library is installed, the build dir goes back to what the gem
  # shipped plus the Makefile (RubyGems builds in the installed gem's ext/evix).
  evix-clean-up: install-so
  \t$(Q) $(RM) $(DLLIB) .sitearchdir.time
  \t$(Q) $(RM_RF) $(EVIX_INSTALL_REMOVES)
MAKE

# The build rules when rb_sys does not write them; mkmf's configuration section
# (DESTDIR, sitearchdir, sitelibdir, RM, COPY, INSTALL_PROG, MAKEDIRS, Q, ECHO, ...)
# comes before them.
EVIX_CARGO_RULES = <<~MAKE
  #### evix: build the Rust crate with cargo ####

  EVIX_RUBY = @RUBY@
  CARGO_MANIFEST = @CARGO_MANIFEST@
  CARGO_PROFILE_DIR = $(CARGO_TARGET_DIR)/$(if $(CARGO_BUILD_TARGET),$(CARGO_BUILD_TARGET)/)release
  CARGO_LIB = @CARGO_LIB@

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

  clean:
  \t$(Q) $(RM) $(CLEANLIBS)
  \t$(Q) $(RM_RF) $(CLEANOBJS)

  distclean realclean: clean
  \t$(Q) $(RM) Makefile mkmf.log

  FORCE:
MAKE

# Make expands "$"; the recipes double-quote every path for the shell.
def evix_fill(template, values)
  template.gsub(/@[A-Z_]+@/) { |key| values.fetch(key).gsub("$", "$$") }
end

def evix_cargo_makefile
  rules = evix_fill(EVIX_CARGO_RULES, "@RUBY@" => RbConfig.ruby,
                                      "@CARGO_MANIFEST@" => File.join(EVIX_CRATE_DIR, "Cargo.toml"),
                                      "@CARGO_LIB@" => evix_cargo_library_name,
                                      "@DLEXT@" => RbConfig::CONFIG.fetch("DLEXT"))
  "#{configuration(EVIX_CRATE_DIR).join}\n#{rules}"
end

def evix_rb_sys_makefile
  create_rust_makefile("evix/evix") do |r|
    r.profile = ENV.fetch("RB_SYS_CARGO_PROFILE", :release).to_sym
    # Make expands $(EVIX_CARGO_FLAGS) when it runs cargo, as in the plain Makefile.
    r.extra_cargo_args += ["--locked", "$(EVIX_CARGO_FLAGS)"]
    # cargo was found above; never fetch a toolchain with curl instead.
    r.auto_install_rust_toolchain = false
    # evix's clean-up below removes what is evix's to remove.
    r.clean_after_install = false
  end
  File.read("Makefile")
end

cargo = evix_find_cargo
evix_check_libclang
rules = evix_use_rb_sys? ? evix_rb_sys_makefile : evix_cargo_makefile
File.write("Makefile", evix_fill(EVIX_SETTINGS, "@CARGO@" => cargo) + rules + EVIX_CLEAN_UP)
