# frozen_string_literal: true

require "spec_helper"

# Loop#start runs a new fiber; a fiber already parked in one of the loop's
# waits is refused, and its wait goes on to its own end.
RSpec.describe "Evix::Loop#start on a parked fiber" do
  it "raises Evix::Error and leaves the wait running to its timeout" do
    loop = Evix::Loop.new
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    result = nil
    fiber = Fiber.new do
      value = loop.suspend(0.1)
      result = [value, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
    end
    loop.next_tick { loop.start(fiber) }
    loop.run_once(0)
    expect { loop.start(fiber) }.to raise_error(Evix::Error, /parked in a wait/)
    loop.run
    value, waited = result
    expect(value).to be_nil # the timeout ended it
    expect(waited).to be >= 0.09
  ensure
    loop&.close
  end
end
