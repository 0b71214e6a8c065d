# frozen_string_literal: true

require "spec_helper"

# Task#wait's timeout is checked at the call, inside a task or out, whether
# the task is done or not.
RSpec.describe "Evix::Task#wait timeout checks" do
  let(:loop) { Evix::Loop.new }

  after { loop.close unless loop.closed? }

  [-1, -0.5, Float::INFINITY, Float::NAN].each do |bad|
    it "rejects timeout: #{bad} outside a run, naming it, and leaves the task alone" do
      task = loop.spawn { loop.sleep(0.01) || :slept }
      message = "timeout must be a finite, non-negative number of seconds (got #{bad.inspect})"
      expect { task.wait(timeout: bad) }.to raise_error(ArgumentError, message)
      expect(task.wait).to eq(:slept)
      expect { task.wait(timeout: bad) }.to raise_error(ArgumentError, message)
    end

    it "rejects timeout: #{bad} inside a task" do
      other = loop.spawn { loop.sleep(0.01) }
      waiter = loop.spawn do
        other.wait(timeout: bad)
      rescue ArgumentError => e
        e.message
      end
      loop.run
      expect(waiter.wait).to match(/timeout.*#{Regexp.escape(bad.inspect)}/)
    end
  end

  it "rejects a timeout that is not a number" do
    task = loop.spawn { :done }
    expect { task.wait(timeout: "1") }.to raise_error(TypeError, /timeout must be a Numeric.*"1"/)
  end

  it "takes a zero timeout: a task still running raises Evix::TimeoutError" do
    task = loop.spawn { loop.sleep(5) }
    expect { task.wait(timeout: 0) }.to raise_error(Evix::TimeoutError)
    task.cancel
    expect { task.wait }.to raise_error(Evix::CancelledError)
  end
end
