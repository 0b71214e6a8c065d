# frozen_string_literal: true

require "spec_helper"

# Evix::Queue between tasks of one loop, never blocking the thread.
RSpec.describe Evix::Queue do
  let(:ev) { new_loop }

  it "pushes (push and <<) and pops in FIFO order; size and empty? follow" do
    seen = []
    ev.spawn do
      queue = Evix::Queue.new
      seen << queue.empty? << queue.size
      queue.push(:a)
      queue << :b
      queue.push([:c])
      seen << queue.empty? << queue.size
      seen << queue.pop << queue.pop << queue.pop
      seen << queue.empty? << queue.size
    end
    ev.run
    expect(seen).to eq([true, 0, false, 3, :a, :b, [:c], true, 0])
  end

  it "#pop waits for a push from another task, while other tasks keep running", timing: true do
    queue = Evix::Queue.new
    got = nil
    ticks = [0]
    ev.spawn { got = queue.pop }
    ev.spawn do
      ev.sleep(0.03)
      queue.push(:item)
    end
    ticker(ev, ticks, -> { got })
    ev.run
    expect(got).to eq(:item)
    expect(ticks[0]).to be >= 2
  end

  it "serves waiting poppers in FIFO order" do
    queue = Evix::Queue.new
    got = []
    %i[a b c].each do |name|
      ev.spawn { got << [name, queue.pop] }
    end
    ev.spawn do
      ev.sleep(0.01)
      [1, 2, 3].each { |i| queue.push(i) }
    end
    ev.run
    expect(got).to eq([[:a, 1], [:b, 2], [:c, 3]])
  end

  it "#pop(timeout:) returns nil when nothing comes in time", timing: true do
    queue = Evix::Queue.new
    result = nil
    took = nil
    ev.spawn do
      t0 = now
      result = queue.pop(timeout: 0.05)
      took = now - t0
    end
    ev.run
    expect(result).to be_nil
    expect(took).to be_between(0.04, 0.5)
    expect(queue.size).to eq(0)
  end

  it "#pop(timeout:) returns an item that comes in time" do
    queue = Evix::Queue.new
    result = nil
    ev.spawn { result = queue.pop(timeout: 2) }
    ev.spawn do
      ev.sleep(0.01)
      queue << :in_time
    end
    ev.run
    expect(result).to eq(:in_time)
  end

  it "a bounded queue makes #push wait while it is full, waking pushers in order" do
    queue = Evix::Queue.new(2)
    log = []
    ev.spawn do
      %i[a b c d].each do |item|
        queue.push(item)
        log << [:pushed, item, queue.size]
      end
    end
    ev.spawn do
      ev.sleep(0.02)
      log << [:size_while_full, queue.size]
      4.times { log << [:popped, queue.pop] }
    end
    ev.run
    expect(log.first(3)).to eq([[:pushed, :a, 1], [:pushed, :b, 2], [:size_while_full, 2]])
    expect(log.select { |entry| entry[0] == :popped }.map(&:last)).to eq(%i[a b c d])
    expect(log.select { |entry| entry[0] == :pushed }.map { |entry| entry[1] }).to eq(%i[a b c d])
  end

  it "#close makes every waiting pop return nil and later pushes raise Evix::ClosedError" do
    queue = Evix::Queue.new
    results = []
    3.times { ev.spawn { results << queue.pop } }
    later = nil
    ev.spawn do
      ev.sleep(0.01)
      queue.close
      begin
        queue.push(:late)
      rescue Evix::ClosedError => e
        later = e
      end
    end
    expect(elapsed { ev.run }).to be < 2
    expect(results).to eq([nil, nil, nil])
    expect(later).to be_a(Evix::ClosedError)
    expect(queue.closed?).to be(true)
  end

  it "#close makes every waiting push on a full bounded queue raise Evix::ClosedError" do
    queue = Evix::Queue.new(1)
    outcomes = []
    ev.spawn { queue.push(:fills_it) } # does not wait: there is room
    2.times do |i|
      ev.spawn do
        queue.push(i)
        outcomes << [:pushed, i]
      rescue Evix::ClosedError
        outcomes << [:closed, i]
      end
    end
    ev.spawn do
      ev.sleep(0.01)
      queue.close
    end
    ev.run
    expect(outcomes.sort).to eq([[:closed, 0], [:closed, 1]])
  end

  it "after #close, pop drains what is left, then returns nil without waiting" do
    queue = Evix::Queue.new
    popped = []
    ev.spawn do
      queue << 1 << 2
      queue.close
      3.times { popped << queue.pop }
      popped << queue.closed?
    end
    ev.run
    expect(popped).to eq([1, 2, nil, true])
  end

  it "a cancelled waiting popper leaves the queue; the next item goes to the next popper" do
    queue = Evix::Queue.new
    got = []
    first = ev.spawn { got << [:first, queue.pop] }
    ev.spawn { got << [:second, queue.pop] }
    ev.spawn do
      ev.sleep(0.01)
      first.cancel
      ev.sleep(0.01)
      queue.push(:x)
    end
    ev.run
    expect(got).to eq([%i[second x]])
    expect { first.wait }.to raise_error(Evix::CancelledError)
    expect(queue.size).to eq(0)
  end

  it "loses no item when a popper is cancelled right after a push meant for it" do
    queue = Evix::Queue.new
    got = []
    popper = ev.spawn { got << queue.pop }
    leftover = :not_checked
    ev.spawn do
      ev.sleep(0.01)
      queue.push(:x) # wakes the popper ...
      popper.cancel  # ... which is cancelled before it runs again
      leftover = queue.pop(timeout: 0.1)
    end
    ev.run
    expect(got + [leftover].compact).to eq([:x])
    expect(queue.size).to eq(0)
  end

  it "carries lines a socket reader gets to consumers, on every backend" do
    Evix.backends.each do |backend|
      evloop = new_loop(backend)
      r, w = socket_pair
      io = evloop.wrap(r)
      queue = Evix::Queue.new(1)
      consumed = []
      evloop.spawn do
        while (line = io.gets)
          queue << line.chomp
        end
        queue.close
      end
      2.times do |i|
        evloop.spawn do
          while (item = queue.pop)
            consumed << [i, item]
            evloop.sleep(0.002)
          end
        end
      end
      evloop.spawn do
        5.times do |n|
          w.write("line#{n}\n")
          evloop.sleep(0.003)
        end
        w.close
      end
      evloop.run
      expect(consumed.map(&:last)).to eq(%w[line0 line1 line2 line3 line4]), backend.to_s
      expect(consumed.map(&:first).uniq.sort).to eq([0, 1]), backend.to_s
    end
  end

  it "works between Fiber.schedule fibers under Evix.run, on every backend" do
    Evix.backends.each do |backend|
      result = evix_run_in_child(backend) do
        queue = Evix::Queue.new(2)
        got = []
        consumer = Fiber.schedule do
          while (item = queue.pop)
            got << item
          end
        end
        Fiber.schedule do
          5.times do |i|
            queue.push(i)
            sleep 0.002
          end
          queue.close
        end
        sleep 0.01 while consumer.alive?
        [got, queue.closed?, queue.pop]
      end
      expect(result).to eq([[0, 1, 2, 3, 4], true, nil]), "#{backend}: #{result.inspect}"
    end
  end

  it "#pop(timeout:) in the Evix.run block returns nil on timeout", timing: true do
    result = evix_run_in_child do
      queue = Evix::Queue.new
      t0 = now
      value = queue.pop(timeout: 0.05)
      [value, (now - t0).between?(0.04, 0.5)]
    end
    expect(result).to eq([nil, true])
  end
end
