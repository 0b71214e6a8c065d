# frozen_string_literal: true

require "spec_helper"

# Leaving a wait early (a timeout, a cancellation, a cancelled watcher) costs
# O(1) or O(log N) per waiter: N waiters leave in about N log N, not N².
# Each case runs at two sizes, 4x apart, in a child; quadratic leaving takes
# about 16x as long at the larger size, N log N under 5x. The bound is 8x,
# with the best of two runs of each size against a loaded machine.
RSpec.describe "Leaving waits at scale", timing: true do
  let(:small_size) { 2_500 }
  let(:large_size) { 10_000 }

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Seconds the block took at +small+ and at +large+ (best of two each).
  def timings(small = small_size, large = large_size, &block)
    in_child(timeout: 60) do
      [small, large].map { |n| Array.new(2) { block.call(n) }.min }
    end
  end

  def expect_n_log_n((small, large))
    expect(large).to be < [small * 8, 0.05].max,
                     "the small size took #{small.round(4)} s, 4x as many #{large.round(4)} s"
  end

  it "N waiters of a Condition leave by one shared deadline" do
    expect_n_log_n(timings do |n|
      loop = Evix::Loop.new
      condition = Evix::Condition.new
      deadline = clock + 0.3 + (n / 4000.0) # every waiter parks before it
      n.times { loop.spawn { condition.wait(timeout: deadline - clock) } }
      loop.run
      left = clock - deadline
      loop.close
      raise "a waiter was still listed" if condition.waiting?

      left
    end)
  end

  it "Barrier#cancel of N parked children" do
    expect_n_log_n(timings do |n|
      took = nil
      Evix.run do
        barrier = Evix::Barrier.new
        n.times { barrier.async { sleep 10 } }
        sleep 0.001
        started = clock
        barrier.cancel
        barrier.wait
        took = clock - started
      end
      took
    end)
  end

  it "N watchers of one fd are cancelled" do
    expect_n_log_n(timings(4 * small_size, 4 * large_size) do |n|
      loop = Evix::Loop.new
      reader, writer = IO.pipe
      watchers = Array.new(n) { loop.add_io(reader, Evix::READ) { nil } }
      started = clock
      watchers.each(&:cancel)
      took = clock - started
      loop.close
      [reader, writer].each(&:close)
      took
    end)
  end
end
