# frozen_string_literal: true

require "spec_helper"

# Evix::Semaphore between tasks of one loop, never blocking the thread.
RSpec.describe Evix::Semaphore do
  let(:ev) { new_loop }

  it "has a limit, counts what is held, and says whether it is available" do
    states = []
    ev.spawn do
      semaphore = Evix::Semaphore.new(2)
      states << [semaphore.limit, semaphore.count, semaphore.available?]
      semaphore.acquire
      states << [semaphore.count, semaphore.available?]
      semaphore.acquire
      states << [semaphore.count, semaphore.available?]
      semaphore.release
      states << [semaphore.count, semaphore.available?]
      semaphore.release
      states << [semaphore.count, semaphore.available?]
    end
    ev.run
    expect(states).to eq([[2, 0, true], [1, true], [2, false], [1, true], [0, true]])
  end

  it "#acquire with a block returns the block's value and releases, even when the block raises" do
    seen = []
    ev.spawn do
      semaphore = Evix::Semaphore.new(1)
      seen << semaphore.acquire { [semaphore.count, :value] }
      seen << semaphore.count
      begin
        semaphore.acquire { raise EvixSpecError, "inside" }
      rescue EvixSpecError => e
        seen << e.message
      end
      seen << semaphore.count << semaphore.available?
    end
    ev.run
    expect(seen).to eq([[1, :value], 0, "inside", 0, true])
  end

  it "never lets more than limit tasks hold it at once" do
    semaphore = Evix::Semaphore.new(2)
    holding = 0
    most = 0
    done = 0
    6.times do
      ev.spawn do
        semaphore.acquire do
          holding += 1
          most = [most, holding].max
          ev.sleep(0.01)
          holding -= 1
          done += 1
        end
      end
    end
    ev.run
    expect([done, most, semaphore.count]).to eq([6, 2, 0])
  end

  it "serves waiters in FIFO order, while other tasks keep running", timing: true do
    semaphore = Evix::Semaphore.new(1)
    order = []
    ticks = [0]
    ev.spawn do
      semaphore.acquire { ev.sleep(0.03) }
    end
    %i[a b c d].each do |name|
      ev.spawn do
        semaphore.acquire do
          order << name
          ev.sleep(0.001)
        end
      end
    end
    ticker(ev, ticks, -> { order.size == 4 })
    ev.run
    expect(order).to eq(%i[a b c d])
    expect(ticks[0]).to be >= 2
  end

  it "a cancelled waiter leaves the queue and never gets the semaphore" do
    semaphore = Evix::Semaphore.new(1)
    got = []
    holder = ev.spawn do
      semaphore.acquire { ev.sleep(0.03) }
    end
    cancelled = ev.spawn { semaphore.acquire { got << :cancelled_one } }
    ev.spawn { semaphore.acquire { got << :next_one } }
    ev.spawn do
      ev.sleep(0.01)
      cancelled.cancel
    end
    ev.run
    holder.wait
    expect(got).to eq([:next_one])
    expect { cancelled.wait }.to raise_error(Evix::CancelledError)
    expect(semaphore.count).to eq(0)
    expect(semaphore.available?).to be(true)
  end

  it "limits Fiber.schedule fibers under Evix.run, on every backend" do
    Evix.backends.each do |backend|
      result = evix_run_in_child(backend) do
        semaphore = Evix::Semaphore.new(2)
        holding = 0
        most = 0
        order = []
        finished = 0
        5.times do |i|
          Fiber.schedule do
            semaphore.acquire do
              holding += 1
              most = [most, holding].max
              order << i
              sleep 0.01
              holding -= 1
            end
            finished += 1
          end
        end
        sleep 0.01 while finished < 5
        [most, order, semaphore.count]
      end
      expect(result).to eq([2, [0, 1, 2, 3, 4], 0]), "#{backend}: #{result.inspect}"
    end
  end
end
