# frozen_string_literal: true

require "spec_helper"

# Evix::Scheduler itself: set and unset on a thread, the loop it makes or is
# given, the fibers it starts and counts.
RSpec.describe Evix::Scheduler, "lifecycle" do
  include EvixSchedulerHelpers

  describe "Fiber.set_scheduler lifecycle" do
    it "close (Fiber.set_scheduler(nil)) runs the remaining fibers, then closes the loop it created" do
      scheduler = described_class.new
      done = false
      Fiber.set_scheduler(scheduler)
      Fiber.schedule do
        sleep 0.03
        done = true
      end
      expect(done).to be(false)
      Fiber.set_scheduler(nil)
      expect(done).to be(true)
      expect(scheduler.loop).to be_closed
      expect(Fiber.scheduler).to be_nil
    ensure
      Fiber.set_scheduler(nil)
    end

    it "leaves a loop it was given open" do
      evloop = new_loop
      scheduler = described_class.new(evloop)
      expect(scheduler.loop).to equal(evloop)
      result = run_with(scheduler) do
        sleep 0.01
        :slept
      end
      expect(result).to eq(:slept)
      expect(evloop).not_to be_closed
    end

    it "closes a thread's scheduler when the thread exits", timing: true do
      scheduler = nil
      done = false
      thread = helper_thread do
        scheduler = described_class.new
        Fiber.set_scheduler(scheduler)
        Fiber.schedule do
          sleep 0.03
          done = true
        end
      end
      thread.join(3)
      expect(done).to be(true)
      expect(scheduler.loop).to be_closed
    end
  end

  describe "fiber, fibers and unblock called directly" do
    it "unblock after the scheduler closed its loop returns nil without raising" do
      scheduler = described_class.new
      scheduler.close
      expect(scheduler.loop).to be_closed
      expect(scheduler.unblock(:spec, Fiber.current)).to be_nil
    end

    it "fiber starts the block at once, in a non-blocking fiber, and returns that fiber" do
      log = []
      info = Evix.run do
        fiber = Fiber.schedule do
          log << [:started, Fiber.current.blocking?]
          sleep 0.01
          log << :resumed
        end
        log << :after_schedule
        fiber
      end
      expect(info).to be_a(Fiber)
      expect(log).to eq([[:started, false], :after_schedule, :resumed])
    end

    it "counts the fibers that have not finished" do
      counts = Evix.run do
        scheduler = Fiber.scheduler
        before = scheduler.fibers
        2.times { Fiber.schedule { sleep 0.02 } }
        during = scheduler.fibers
        sleep 0.05
        [before, during, scheduler.fibers]
      end
      expect(counts).to eq([1, 3, 1])
    end
  end
end
