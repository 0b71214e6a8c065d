# frozen_string_literal: true

require "spec_helper"

# Waking every waiter from outside a task runs each inside its Loop#resume:
# one that raises must not keep the others from being woken.
RSpec.describe "Waking every waiter when one of them raises" do
  let(:loop) { Evix::Loop.new }

  after { loop.close unless loop.closed? }

  it "Condition#broadcast from a callback wakes every waiter, then raises the first failure" do
    condition = Evix::Condition.new
    woken = []
    tasks = Array.new(3) do |i|
      loop.spawn do
        value = condition.wait
        woken << i
        raise "waiter #{i}" if i < 2

        value
      end
    end
    loop.run_once(0)
    expect { condition.broadcast(:go) }.to raise_error(RuntimeError, "waiter 0") { |e|
      expect(e.suppressed.map(&:message)).to eq(["waiter 1"])
    }
    expect(woken).to eq([0, 1, 2])
    expect(tasks.last.wait).to eq(:go)
    expect(condition.waiting?).to be(false)
  end

  it "Queue#close from a callback ends every waiting pop even when the first popper raises" do
    queue = Evix::Queue.new
    raiser = loop.spawn { queue.pop.nil? && raise("popper") }
    popper = loop.spawn { [:popped, queue.pop] }
    loop.run_once(0)
    expect { queue.close }.to raise_error(RuntimeError, "popper")
    expect { raiser.wait }.to raise_error(RuntimeError, "popper")
    expect(popper.wait).to eq([:popped, nil])
  end
end
