# frozen_string_literal: true

require "spec_helper"

# Evix::Barrier between tasks of one loop (loop.spawn tasks and Fiber.schedule
# fibers under Evix.run), never blocking the thread. Edges shared by the
# primitives: primitives_edges_spec.rb.
RSpec.describe Evix::Barrier do
  let(:ev) { new_loop }

  it "#async returns a running Evix::Task on the current task's loop; #size counts the running ones",
     timing: true do
    sizes = []
    tasks = nil
    ev.spawn do
      barrier = Evix::Barrier.new
      tasks = Array.new(3) do |i|
        barrier.async do
          ev.sleep([0.01, 0.3, 0.35][i])
          i * 10
        end
      end
      sizes << barrier.size
      ev.sleep(0.15)
      sizes << barrier.size
      barrier.wait
      sizes << barrier.size
    end
    ev.run
    expect(tasks).to all(be_a(Evix::Task))
    expect(tasks.map(&:wait)).to eq([0, 10, 20])
    expect(sizes).to eq([3, 2, 0])
  end

  it "#wait waits for every task, while other tasks keep running", timing: true do
    done = []
    ticks = [0]
    waited = nil
    ev.spawn do
      barrier = Evix::Barrier.new
      [0.25, 0.05, 0.15].each do |delay|
        barrier.async do
          ev.sleep(delay)
          done << delay
        end
      end
      t0 = now
      barrier.wait
      waited = now - t0
    end
    ticker(ev, ticks, -> { waited })
    ev.run
    expect(done).to eq([0.05, 0.15, 0.25])
    expect(waited).to be_between(0.24, 1)
    expect(ticks[0]).to be >= 3
  end

  it "raises the first failure from #wait and cancels the others, whose ensure blocks run", timing: true do
    log = []
    raised = nil
    sleeper = nil
    ev.spawn do
      barrier = Evix::Barrier.new
      sleeper = barrier.async do
        ev.sleep(5)
        log << :slept_through
      ensure
        log << :sleeper_ensure
      end
      barrier.async do
        ev.sleep(0.01)
        raise EvixSpecError, "first"
      end
      begin
        barrier.wait
      rescue EvixSpecError => e
        raised = e
      end
    end
    expect(elapsed { ev.run }).to be < 1
    expect(raised&.message).to eq("first")
    expect(log).to eq([:sleeper_ensure])
    expect(sleeper.cancelled?).to be(true)
    expect { sleeper.wait }.to raise_error(Evix::CancelledError)
  end

  it "keeps later failures in #errors (all, in order) and in the raised exception's #suppressed" do
    raised = nil
    barrier = nil
    ev.spawn do
      barrier = Evix::Barrier.new
      barrier.async do
        ev.sleep(5)
      ensure
        raise EvixSpecError, "second" # fails while being cancelled
      end
      barrier.async do
        ev.sleep(0.01)
        raise EvixSpecError, "first"
      end
      begin
        barrier.wait
      rescue EvixSpecError => e
        raised = e
      end
    end
    ev.run
    expect(raised.message).to eq("first")
    expect(barrier.errors.map(&:message)).to eq(%w[first second])
    expect(barrier.errors.first).to equal(raised)
    expect(raised.suppressed).to be_an(Array)
    expect(raised.suppressed.map(&:message)).to eq(["second"])
  end

  it "#cancel cancels every running task; their ensure blocks run" do
    ensured = []
    tasks = nil
    sizes = []
    ev.spawn do
      barrier = Evix::Barrier.new
      tasks = Array.new(3) do |i|
        barrier.async do
          ev.sleep(5)
        ensure
          ensured << i
        end
      end
      ev.sleep(0.01)
      sizes << barrier.size
      barrier.cancel
      ev.sleep(0.01)
      sizes << barrier.size
    end
    expect(elapsed { ev.run }).to be < 2
    expect(ensured.sort).to eq([0, 1, 2])
    expect(tasks.map(&:cancelled?)).to eq([true, true, true])
    expect(sizes).to eq([3, 0])
  end

  it "works in Fiber.schedule fibers under Evix.run, on every backend" do
    Evix.backends.each do |backend|
      result = evix_run_in_child(backend) do
        barrier = Evix::Barrier.new
        r, w = UNIXSocket.pair
        tasks = [
          barrier.async { r.read(5) },
          barrier.async do
            sleep 0.02
            w.write("hello")
            :wrote
          end
        ]
        ticks = 0
        Fiber.schedule do
          while barrier.size.positive?
            sleep 0.005
            ticks += 1
          end
        end
        barrier.wait
        [tasks.map(&:wait), barrier.size, ticks.positive?]
      end
      expect(result).to eq([["hello", :wrote], 0, true]), "#{backend}: #{result.inspect}"
    end
  end

  it "under Evix.run, the first failure cancels the others and is raised by #wait" do
    result = evix_run_in_child do
      barrier = Evix::Barrier.new
      log = []
      barrier.async do
        sleep 5
      ensure
        log << :ensure
      end
      barrier.async do
        sleep 0.01
        raise EvixSpecError, "first"
      end
      t0 = now
      begin
        barrier.wait
        [:no_error]
      rescue EvixSpecError => e
        [e.message, log, now - t0 < 1]
      end
    end
    expect(result).to eq(["first", [:ensure], true])
  end
end
