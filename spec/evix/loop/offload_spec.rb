# frozen_string_literal: true

require "spec_helper"

# Evix.offload / Evix::Loop#offload and the Evix::Offload thread pool.
RSpec.describe Evix::Offload do
  # Runs +evloop+ until the block returns truthy; fails after +timeout+.
  def run_loop_until(evloop, timeout: 3)
    deadline = now + timeout
    until yield
      raise RSpec::Expectations::ExpectationNotMetError, "condition not met within #{timeout}s" if now > deadline

      evloop.run_once(0.05)
    end
  end

  describe "Evix.offload" do
    it "returns the block's value to the calling fiber while other fibers keep running", timing: true do
      ticks = 0
      done = false
      value = nil
      took = elapsed do
        value = Evix.run do
          Fiber.schedule do
            until done
              ticks += 1
              sleep 0.01
            end
          end
          result = Evix.offload do
            sleep 0.3
            :from_the_pool
          end
          done = true
          result
        end
      end
      expect(value).to eq(:from_the_pool)
      expect(ticks).to be >= 5
      expect(took).to be_between(0.29, 1)
    end

    it "runs the block on another thread" do
      caller_thread, pool_thread = Evix.run { [Thread.current, Evix.offload { Thread.current }] }
      expect(pool_thread).not_to equal(caller_thread)
      expect(caller_thread).to equal(Thread.current)
    end

    it "wakes an otherwise idle loop promptly when the result arrives", timing: true do
      took = elapsed { Evix.run { Evix.offload { sleep 0.1 } } }
      expect(took).to be_between(0.09, 0.5) # the scheduler's idle poll is 1 s
    end

    it "raises the block's exception in the caller, and the loop keeps working" do
      result = Evix.run do
        error = begin
          Evix.offload { raise EvixSpecError, "in the pool" }
        rescue EvixSpecError => e
          e
        end
        sleep 0.01
        [error, Evix.offload { :again }]
      end
      expect(result[0]).to be_a(EvixSpecError)
      expect(result[0].message).to eq("in the pool")
      expect(result[1]).to eq(:again)
    end

    it "raises Evix::Error outside Evix.run" do
      expect { Evix.offload { :never } }.to raise_error(Evix::Error, /Evix.run/)
    end

    it "raises Evix::Error from a blocking fiber inside Evix.run" do
      error = Evix.run do
        Fiber.new(blocking: true) { Evix.offload { :never } }.resume
      rescue Evix::Error => e
        e
      end
      expect(error).to be_a(Evix::Error)
    end

    it "raises ArgumentError without a block" do
      error = Evix.run do
        Evix.offload
      rescue ArgumentError => e
        e
      end
      expect(error).to be_a(ArgumentError)
      expect(error.message).to match(/block/)
    end

    it "keeps waiting correctly when Timeout.timeout interrupts the caller first", timing: true do
      result = Evix.run do
        error = begin
          Timeout.timeout(0.05) { Evix.offload { sleep 0.15 } }
        rescue Timeout::Error => e
          e
        end
        sleep 0.2 # the abandoned job finishes meanwhile; its result must go nowhere
        [error, Evix.offload { :after }]
      end
      expect(result[0]).to be_a(Timeout::Error)
      expect(result[1]).to eq(:after)
    end

    it "gives each of many concurrent callers its own result" do
      result = in_child do
        Evix.run { Evix.offload { :warm } } # an idle pool thread, as after any earlier offload
        values = {}
        Evix.run do
          10.times do |i|
            Fiber.schedule do
              values[i] = Evix.offload do
                sleep 0.01 * (i % 3)
                i * 10
              end
            end
          end
        end
        values.sort.to_h
      end
      expect(result).to eq(Array.new(10) { |i| [i, i * 10] }.to_h)
    end

    it "runs offloaded jobs in parallel while the pool has room, even when a thread is idle", timing: true do
      result = in_child do
        Evix.run { Evix.offload { :warm } } # an idle pool thread
        lock = Mutex.new
        arrived = 0
        # Each job waits (up to 1 s) until all three run at the same time.
        job = lambda do
          lock.synchronize { arrived += 1 }
          deadline = now + 1
          sleep 0.005 until lock.synchronize { arrived } == 3 || now > deadline
          lock.synchronize { arrived } == 3
        end
        seen = []
        Evix.run { 3.times { Fiber.schedule { seen << Evix.offload(&job) } } }
        seen
      end
      expect(result).to eq([true, true, true]) # default pool of 4: not one after the other
    end
  end

  describe "Evix::Loop#offload" do
    it "returns the value to a fiber of Evix.run" do
      expect(Evix.run { Fiber.scheduler.loop.offload { 1 + 1 } }).to eq(2)
    end

    it "returns the value to an Evix::Task while the loop runs other tasks", timing: true do
      evloop = new_loop
      ticks = 0
      value = nil
      evloop.spawn do
        value = evloop.offload do
          sleep 0.3
          :task_value
        end
      end
      evloop.spawn do
        until value
          ticks += 1
          evloop.sleep(0.01)
        end
      end
      evloop.run
      expect(value).to eq(:task_value)
      expect(ticks).to be >= 5
    end

    it "raises the block's exception in the task" do
      evloop = new_loop
      error = nil
      evloop.spawn do
        evloop.offload { raise EvixSpecError, "task" }
      rescue EvixSpecError => e
        error = e
      end
      evloop.run
      expect(error&.message).to eq("task")
    end

    it "keeps #run going while the job is out by a hold, not a timer, and lets go of it after" do
      evloop = new_loop
      gate = Thread::Queue.new
      value = nil
      evloop.spawn { value = evloop.offload { gate.pop } }
      evloop.run_once(0) # the task starts and parks while its job waits at the gate
      expect(evloop.alive?).to be(true)
      expect(evloop.stats[:timers]).to eq(0)
      gate << :through
      run_loop_until(evloop) { value }
      expect(value).to eq(:through)
      expect(evloop.alive?).to be(false)
    end

    it "lets go of its hold when the caller is interrupted before the result comes" do
      evloop = new_loop
      gate = Thread::Queue.new
      task = evloop.spawn { evloop.offload { gate.pop } }
      evloop.run_once(0)
      task.cancel
      run_loop_until(evloop) { !task.alive? }
      expect(task).to be_cancelled
      expect(evloop.alive?).to be(false)
    ensure
      gate << :late # the abandoned job ends; its result goes nowhere
    end

    it "holds the loop by Evix::Hold tokens: #run returns once every hold is released", timing: true do
      result = in_child do
        evloop = Evix::Loop.new
        idle = evloop.alive?
        first, second = Array.new(2) { Evix::Hold.new(evloop) }
        released = first.release
        Thread.new do
          sleep 0.1
          evloop.post { second.release }
        end
        took = elapsed { evloop.run }
        [idle, released, took, evloop.alive?, first.release, second.release]
      end
      idle, released, took, alive, *again = result
      expect([idle, released]).to eq([false, true])
      expect(took).to be_between(0.09, 2) # held until the other thread's post released the second
      expect([alive, again]).to eq([false, [false, false]]) # nothing held after; a token releases once
    end

    it "lets go of a hold quietly on a closed loop (an offload's ensure may run after Loop#close)" do
      evloop = new_loop
      hold = Evix::Hold.new(evloop)
      evloop.close
      expect(hold.release).to be(false)
    end

    it "refuses a hold on a closed loop, or on something that is not a loop" do
      evloop = new_loop
      evloop.close
      expect { Evix::Hold.new(evloop) }.to raise_error(Evix::ClosedError)
      expect { Evix::Hold.new(:loop) }.to raise_error(TypeError, /Evix::Loop/)
    end

    it "raises Evix::Error when called outside a fiber the loop runs" do
      evloop = new_loop
      expect { evloop.offload { :never } }.to raise_error(Evix::Error)
    end

    it "raises ArgumentError without a block" do
      evloop = new_loop
      expect { evloop.offload }.to raise_error(ArgumentError, /block/)
    end
  end

  describe "Evix::Offload.new" do
    it "defaults to 4 threads" do
      expect(described_class.new.size).to eq(4)
    end

    [0, -1, 1.5, "2", nil].each do |size|
      it "raises ArgumentError for size: #{size.inspect}" do
        expect { described_class.new(size: size) }.to raise_error(ArgumentError, /size/)
      end
    end
  end

  describe "#submit" do
    let(:evloop) { new_loop }

    it "runs at most size jobs at once, on at most size threads", timing: true do
      pool = described_class.new(size: 2)
      lock = Mutex.new
      running = 0
      peak = 0
      finished = 0
      threads = []
      6.times do
        work = lambda do
          lock.synchronize do
            running += 1
            peak = [peak, running].max
            threads << Thread.current
          end
          sleep 0.05
          lock.synchronize do
            running -= 1
            finished += 1
          end
        end
        pool.submit(evloop, work) { nil }
      end
      took = elapsed { wait_until { lock.synchronize { finished == 6 } } }
      pool.close
      expect(peak).to eq(2)
      expect(threads.uniq.size).to eq(2)
      expect(took).to be_between(0.12, 0.5) # 6 jobs of 0.05 s, 2 at a time
    end

    it "calls each callback on the loop's thread", timing: true do
      pool = described_class.new(size: 2)
      seen = []
      3.times { |i| pool.submit(evloop, -> { i }) { |_value, _error| seen << Thread.current } }
      run_loop_until(evloop) { seen.size >= 3 }
      pool.close
      expect(seen).to all(equal(Thread.current))
    end

    it "hands each job's result to that job's callback, also when jobs queue behind one thread", timing: true do
      pool = described_class.new(size: 1)
      results = {}
      5.times do |i|
        pool.submit(evloop, lambda {
          sleep 0.01
          i * 100
        }) { |value, _error| (results[i] ||= []) << value }
      end
      run_loop_until(evloop) { results.values.sum(&:size) >= 5 }
      evloop.run_once(0.05) # anything delivered twice would show up now
      pool.close
      expect(results).to eq(Array.new(5) { |i| [i, [i * 100]] }.to_h)
    end

    it "calls back with [nil, error] when the job raises", timing: true do
      pool = described_class.new(size: 1)
      outcome = nil
      pool.submit(evloop, -> { raise EvixSpecError, "job" }) { |value, error| outcome = [value, error] }
      run_loop_until(evloop) { outcome }
      pool.close
      expect(outcome[0]).to be_nil
      expect(outcome[1]).to be_a(EvixSpecError)
      expect(outcome[1].message).to eq("job")
    end

    it "keeps working for other loops after a job's loop was closed", timing: true do
      pool = described_class.new(size: 1)
      gone = Evix::Loop.new
      pool.submit(gone, lambda {
        sleep 0.05
        :lost
      }) { raise "must not be called" }
      gone.close
      outcome = nil
      pool.submit(evloop, -> { :delivered }) { |value, _error| outcome = value }
      run_loop_until(evloop) { outcome }
      pool.close
      expect(outcome).to eq(:delivered)
    end

    it "finishes queued jobs on close, then refuses new ones with Evix::ClosedError" do
      pool = described_class.new(size: 1)
      ran = Thread::Queue.new
      3.times do |i|
        pool.submit(evloop, lambda {
          sleep 0.01
          ran << i
        }) { nil }
      end
      pool.close
      expect(Array.new(ran.size) { ran.pop }).to eq([0, 1, 2])
      expect { pool.submit(evloop, -> {}) { nil } }.to raise_error(Evix::ClosedError)
    end
  end
end
