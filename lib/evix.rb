# frozen_string_literal: true

require_relative "evix/version"

# evix: an event loop with a Rust core and a fiber-based Ruby layer.
module Evix
  # Base class of every error evix raises itself.
  class Error < StandardError; end

  # Raised when a closed loop or IO is used.
  class ClosedError < Error; end

  # Raised when an operation does not finish within its timeout.
  class TimeoutError < Error; end

  # Raised in a task by Evix::Task#cancel (at its wait point), and by
  # Evix::Task#wait on a cancelled task.
  class CancelledError < Error; end

  # Extended onto an exception raised for a group of failures (by
  # Evix::Barrier#wait and Evix.run): the later ones are kept in #suppressed.
  module Suppressed
    # @return [Array<Exception>] the failures that came after this one
    def suppressed
      @suppressed ||= []
    end
  end
end

# A build for this Ruby's minor version (lib/evix/3.3/evix.so, lib/evix/3.4/evix.so, as rake
# compat:ruby33 and compat:ruby34 make) wins over the default one.
begin
  require "evix/#{RUBY_VERSION[/\A\d+\.\d+/]}/evix"
rescue LoadError
  require "evix/evix"
end
# The layers, each built on the ones before (docs/architecture.md): loop, sync, io,
# scheduler, net, http.
require_relative "evix/arguments"
require_relative "evix/backtrace"
require_relative "evix/loop/task"
require_relative "evix/loop/nursery"
require_relative "evix/loop/signals"
require_relative "evix/loop/loop"
require_relative "evix/loop/stall"
require_relative "evix/loop/offload"
require_relative "evix/sync/wait_list"
require_relative "evix/sync/condition"
require_relative "evix/sync/semaphore"
require_relative "evix/sync/queue"
require_relative "evix/sync/barrier"
require_relative "evix/io/io"
require_relative "evix/io/io_patches"
require_relative "evix/scheduler/scheduler"
require_relative "evix/scheduler/run"
require_relative "evix/net/tcp_server"
require_relative "evix/net/tcp_client"
require_relative "evix/net/unix_server"
require_relative "evix/net/unix_client"
require_relative "evix/net/workers"
Evix.autoload :TLS, File.expand_path("evix/net/tls", __dir__) # loads openssl: only when TLS is used
require_relative "evix/http"
