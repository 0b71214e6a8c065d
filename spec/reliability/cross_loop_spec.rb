# frozen_string_literal: true

require "spec_helper"

# Tasks of different loops: a task may wait for a task of another loop, on
# this thread or another; Evix.run inside a task of a plain loop is refused
# before it installs anything.
RSpec.describe "Tasks across loops" do
  it "a task waits for a task of a loop on another thread, and is resumed when it ends" do
    outcome = in_child(timeout: 10) do
      a = Evix::Loop.new
      handoff = Thread::Queue.new
      other = Thread.new do
        b = Evix::Loop.new
        handoff << b.spawn { b.sleep(0.05) || :from_b }
        b.run
        b.close
      end
      target = handoff.pop
      waiter = a.spawn { [target.wait(timeout: 5), Evix::Task.current.loop.equal?(a)] }
      a.run
      other.join
      waiter.wait
    end
    expect(outcome).to eq([:from_b, true])
  end

  it "hands a failure of the other loop's task to the waiter" do
    outcome = in_child(timeout: 10) do
      a = Evix::Loop.new
      b = Evix::Loop.new
      target = b.spawn { b.sleep(0.02) || raise(ArgumentError, "from b") }
      waiter = a.spawn do
        target.wait(timeout: 5)
      rescue ArgumentError => e
        e.message
      end
      a.run_once(0) # the waiter parks on a
      b.run # b runs on this thread too: its task ends and posts the wake to a
      a.run
      waiter.wait
    end
    expect(outcome).to eq("from b")
  end

  it "times out a wait for another loop's task that nobody runs" do
    outcome = in_child(timeout: 10) do
      a = Evix::Loop.new
      b = Evix::Loop.new
      target = b.spawn { :never_started }
      waiter = a.spawn do
        target.wait(timeout: 0.05)
      rescue Evix::TimeoutError => e
        e.class
      end
      a.run
      [waiter.wait, target.state]
    end
    expect(outcome).to eq([Evix::TimeoutError, :pending])
  end

  it "refuses Evix.run inside a task of a plain loop, leaving no scheduler behind" do
    outcome = in_child(timeout: 10) do
      loop = Evix::Loop.new
      task = loop.spawn do
        Evix.run { :inner }
      rescue Evix::Error => e
        [e.message, Fiber.scheduler]
      end
      loop.run
      task.wait + [Fiber.scheduler]
    end
    message, inside, after = outcome
    expect(message).to match(/Evix.run cannot run inside a task of another Evix::Loop/)
    expect([inside, after]).to eq([nil, nil])
  end
end
