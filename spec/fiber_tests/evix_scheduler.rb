# frozen_string_literal: true

# Loaded in place of the reference `Scheduler` class of Ruby's own
# test/fiber/scheduler.rb (spec/fiber_tests/run.rb cuts that class out of a
# copy of the file and requires this instead), so that Ruby's tests run
# against Evix::Scheduler. The reference's subclasses (BrokenUnblockScheduler,
# SleepingBlockingScheduler, ...) and the tests' own subclasses then inherit
# from this class.
#
# Three tests call helpers that are not part of the Fiber::Scheduler
# interface but of the reference class only; the adapters below give them
# the same meaning in evix's terms. They belong to this harness: lib/ has
# none of them.

# On the load path here: assert_in_out_err runs some tests in a child Ruby
# without run.rb's -I.
lib = File.expand_path("../../lib", __dir__)
$LOAD_PATH.unshift(lib) unless $LOAD_PATH.include?(lib)
require "evix"

# Evix::Scheduler under the reference's name, with its test-only helpers.
class Scheduler < Evix::Scheduler
  # The reference takes the fiber its hooks transfer back to; evix's loop
  # knows its own.
  def initialize(_fiber = nil)
    super()
  end

  # Reference: switches to the scheduler's fiber and forgets the calling
  # one, which nothing resumes any more (test_mutex_deadlock parks a fiber
  # holding a Mutex this way). Here: a wait on the loop that nothing can end.
  def transfer
    loop.suspend
  end

  # Reference: the fibers blocked with a timeout (fiber => deadline); the
  # tests count them. Here: the scheduler's tasks parked with a deadline,
  # fiber => seconds left.
  def waiting
    tasks = nursery.instance_variable_get(:@tasks).keys
    tasks.filter_map do |task|
      wait = loop.wait_of(task.fiber)
      [task.fiber, wait[2]] if wait&.at(2)
    end.to_h
  end

  # Reference: true once the scheduler was closed. Here: close closes the
  # loop the scheduler created.
  def closed?
    loop.closed?
  end
end
