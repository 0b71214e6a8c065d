# frozen_string_literal: true

require "spec_helper"

# A fiber that ended after a transfer keeps its stack (about 14 KB and two
# memory mappings) for as long as its Fiber object lives: a finished task
# must not keep it, and a burst of short tasks must not outrun the GC.
RSpec.describe "Finished tasks' fiber stacks" do
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

  # In a process of its own: a forked child would start from the suite's
  # whole heap, and its peak RSS with it.
  def peak_after(code)
    run = run_ruby(<<~RUBY, timeout: 60)
      #{code}
      puts [done, File.read("/proc/self/status")[/VmHWM:\\s+(\\d+)/, 1].to_i / 1024].join(" ")
    RUBY
    expect(run.timed_out).to be(false)
    expect(run.err).to eq("")
    run.out.split.map { |number| Integer(number) }
  end

  it "runs a 100,000-spawn burst with every task referenced in well under 300 MB",
     if: File.exist?("/proc/self/status") do
    done, rss = peak_after(<<~RUBY)
      loop = Evix::Loop.new
      tasks = Array.new(100_000) { |i| loop.spawn { i } }
      loop.run
      done = tasks.each_with_index.count { |t, i| t.state == :done && t.wait == i }
    RUBY
    expect(done).to eq(100_000)
    expect(rss).to be < 300
  end

  it "runs a 100,000-child Barrier burst under Evix.run in well under 300 MB", if: File.exist?("/proc/self/status") do
    done, rss = peak_after(<<~RUBY)
      tasks = []
      Evix.run do
        barrier = Evix::Barrier.new
        100_000.times { |i| tasks << barrier.async { i } }
        barrier.wait
      end
      done = tasks.count { |t| t.state == :done }
    RUBY
    expect(done).to eq(100_000)
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
