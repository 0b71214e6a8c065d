# frozen_string_literal: true

# Runs a group's examples once per backend of Evix.backends (epoll and poll on
# Linux), as spec/evix/loop/loop_spec.rb runs the loop contract: for the fiber
# layer (Evix::IO, Task, TCPServer, Scheduler), whose code paths are the same
# on every backend but whose waits are not. Only examples that wait on I/O
# belong under it; pure-Ruby ones would just run twice.
#
# In a group:             on_each_backend { it "..." }
# For a whole file:       EachBackend.describe(Evix::IO) { it "..." }
#
# Each copy is a context "on <backend>" whose examples see +backend+, and
# run with EVIX_BACKEND set to it, so that every loop made without an
# explicit backend (new_loop, Evix::Loop.new, Evix.run, Evix::Scheduler.new,
# and the children of in_child and run_ruby) uses it.
module EachBackend
  # Like RSpec.describe, the group's body defined once per backend. (The
  # group is the caller's file's, so failures name that file for rerunning.)
  def self.describe(*args, &)
    RSpec.describe(*args, caller: caller) { on_each_backend(&) }
  end

  # EVIX_BACKEND set to +backend+ while the block runs.
  def self.with_backend(backend)
    saved = ENV.fetch("EVIX_BACKEND", nil)
    ENV["EVIX_BACKEND"] = backend.to_s
    yield
  ensure
    ENV["EVIX_BACKEND"] = saved
  end

  # Defines the block's examples and groups once per backend (see above).
  def on_each_backend(&)
    Evix.backends.each do |backend|
      context "on #{backend}" do
        let(:backend) { backend }
        around { |example| EachBackend.with_backend(backend) { example.run } }
        class_exec(&)
      end
    end
  end
end

RSpec.configure { |config| config.extend EachBackend }
