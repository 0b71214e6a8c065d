# frozen_string_literal: true

# Which Fiber::Scheduler interface the running Ruby has: the one place evix
# looks at the Ruby version for its hooks. Hooks that an older Ruby never
# calls are defined on every Ruby (fiber_interrupt, yield, io_close); only
# the ones whose meaning changed depend on this. (Evix::Scheduler, defined
# by scheduler.rb and the extension, only gets this module as a constant.)
module Evix::Scheduler::Interface # rubocop:disable Style/ClassAndModuleChildren -- does not open the class
  # [major, minor] of the running Ruby.
  RUBY = RUBY_VERSION.split(".").first(2).map(&:to_i).freeze

  # Ruby 3.3: io_select, and io_pread(io, buffer, from, length, offset).
  SELECT_AND_PREAD = (RUBY <=> [3, 3]) >= 0

  # Ruby 4.1 (RUBY_FIBER_SCHEDULER_VERSION 4): io_read and io_write take
  # (io, buffer, offset, length) and make one transfer of at most
  # +length+ bytes, returning a short count, or -EAGAIN instead of
  # waiting (Ruby waits with io_wait and asks again); io_pread takes
  # (io, buffer, from, offset, length) alike.
  SINGLE_TRANSFER = (RUBY <=> [4, 1]) >= 0
end
