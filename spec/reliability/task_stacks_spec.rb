# frozen_string_literal: true

require "spec_helper"
require_relative "support/reliability_helpers"

# A fiber that ended after a transfer keeps its stack (about 14 KB and two
# memory mappings) for as long as its Fiber object lives: a finished task
# must not keep it, and a burst of short tasks must not outrun the GC.
RSpec.describe "Finished tasks' fiber stacks" do
  def peak_rss_mb
    File.read("/proc/self/status")[/VmHWM:\s+(\d+)/, 1].to_i / 1024
  end

  # Under GC.stress (rake spec:gc_stress) the bursts shrink: there they
  # check that every task's fiber stays marked, not the memory bound.
  let(:burst) { scaled(100_000, 1_000) }

  it "lets go of the fiber once the task has ended" do
    loop = Evix::Loop.new
    task = loop.spawn { Evix::Task.current.fiber }
    expect(task.fiber).to be_nil # not started yet
    loop.run
    expect(task.wait).to be_a(Fiber)
    expect(task.fiber).to be_nil
  ensure
    loop&.close
  end

  it "still hands Fiber.schedule the task's fiber" do
    fiber = nil
    Evix.run { fiber = Fiber.schedule { sleep 0.001 } }
    expect(fiber).to be_a(Fiber)
    expect(fiber.alive?).to be(false)
  end

  it "runs a 100,000-spawn burst with every task referenced in well under 300 MB",
     if: File.exist?("/proc/self/status") do
    outcome = in_child(timeout: 60) do
      loop = Evix::Loop.new
      tasks = Array.new(burst) { |i| loop.spawn { i } }
      loop.run
      [tasks.count { |t| t.state == :done }, tasks.last.wait, peak_rss_mb]
    end
    done, last, rss = outcome
    expect([done, last]).to eq([burst, burst - 1]), outcome.inspect
    expect(rss).to be < 300
  end

  it "runs a 100,000-child Barrier burst under Evix.run in well under 300 MB", if: File.exist?("/proc/self/status") do
    outcome = in_child(timeout: 60) do
      tasks = []
      Evix.run do
        barrier = Evix::Barrier.new
        burst.times { |i| tasks << barrier.async { i } }
        barrier.wait
      end
      [tasks.count { |t| t.state == :done }, peak_rss_mb]
    end
    done, rss = outcome
    expect(done).to eq(burst), outcome.inspect
    expect(rss).to be < 300
  end
end

RSpec.describe "Evix::Loop#tasks before a task starts" do
  it "lists a task that has no fiber yet as pending, waiting on nothing" do
    loop = Evix::Loop.new
    task = loop.spawn { :ran }
    info = loop.tasks.find { |i| i.task.equal?(task) }
    expect([info.state, info.waiting]).to eq([:pending, nil])
    loop.run
    expect(task.wait).to eq(:ran)
  ensure
    loop&.close
  end
end
