# frozen_string_literal: true

require "spec_helper"

# Issue 13, "Structured concurrency": Evix::Barrier, Evix::Semaphore, Evix::Queue and
# Evix::Condition between tasks of one loop (loop.spawn tasks and Fiber.schedule fibers
# under Evix.run), never blocking the thread; and Ruby's own Queue, Mutex and
# ConditionVariable under Evix.run. The four classes do not exist on today's main, so
# their examples fail with NameError there.
RSpec.describe "Evix structured concurrency primitives" do
  let(:ev) { new_loop }

  # A task that counts ticks every 5 ms until +stop+ returns true: proof that the
  # loop keeps running other tasks while one waits.
  def ticker(evloop, counter, stop)
    evloop.spawn do
      until stop.call
        evloop.sleep(0.005)
        counter[0] += 1
      end
    end
  end

  def mono
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  describe "Evix::Barrier" do
    it "#async returns a running Evix::Task on the current task's loop; #size counts the running ones",
       timing: true do
      sizes = []
      tasks = nil
      ev.spawn do
        barrier = Evix::Barrier.new
        tasks = Array.new(3) do |i|
          barrier.async do
            ev.sleep([0.01, 0.08, 0.1][i])
            i * 10
          end
        end
        sizes << barrier.size
        ev.sleep(0.04)
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
        [0.05, 0.01, 0.03].each do |delay|
          barrier.async do
            ev.sleep(delay)
            done << delay
          end
        end
        t0 = mono
        barrier.wait
        waited = mono - t0
      end
      ticker(ev, ticks, -> { waited })
      ev.run
      expect(done).to eq([0.01, 0.03, 0.05])
      expect(waited).to be_between(0.04, 0.5)
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
        t0 = mono
        begin
          barrier.wait
          [:no_error]
        rescue EvixSpecError => e
          [e.message, log, mono - t0 < 1]
        end
      end
      expect(result).to eq(["first", [:ensure], true])
    end
  end

  describe "Evix::Semaphore" do
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

  describe "Evix::Queue" do
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
        t0 = mono
        result = queue.pop(timeout: 0.05)
        took = mono - t0
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
        t0 = mono
        value = queue.pop(timeout: 0.05)
        [value, (mono - t0).between?(0.04, 0.5)]
      end
      expect(result).to eq([nil, true])
    end
  end

  describe "Evix::Condition" do
    it "#wait returns the value given to #signal; #signal says whether someone waited" do
      condition = Evix::Condition.new
      got = nil
      signalled = []
      ev.spawn { got = condition.wait }
      ev.spawn do
        signalled << condition.waiting?
        signalled << condition.signal(:value)
        ev.sleep(0)
        signalled << condition.waiting? << condition.signal(:nobody)
      end
      ev.run
      expect(got).to eq(:value)
      expect(signalled).to eq([true, true, false, false])
    end

    it "#signal wakes one waiter at a time; the others go on waiting" do
      condition = Evix::Condition.new
      woken = []
      3.times { |i| ev.spawn { woken << [i, condition.wait] } }
      steps = []
      ev.spawn do
        condition.signal(:one)
        ev.sleep(0.01)
        steps << [woken.size, condition.waiting?]
        condition.signal(:two)
        ev.sleep(0.01)
        steps << woken.size
        condition.signal(:three)
      end
      ev.run
      expect(steps).to eq([[1, true], 2])
      expect(woken.map(&:last)).to eq(%i[one two three])
      expect(woken.map(&:first).sort).to eq([0, 1, 2])
    end

    it "#broadcast wakes every waiter with its value" do
      condition = Evix::Condition.new
      woken = []
      3.times { |i| ev.spawn { woken << [i, condition.wait] } }
      ev.spawn do
        ev.sleep(0.01)
        condition.broadcast(:all)
      end
      ev.run
      expect(woken.sort).to eq([[0, :all], [1, :all], [2, :all]])
    end

    it "#signal and #broadcast without a value wake with nil" do
      condition = Evix::Condition.new
      woken = []
      2.times { ev.spawn { woken << condition.wait(timeout: 2) } }
      ev.spawn do
        ev.sleep(0.01)
        condition.signal
        condition.broadcast
      end
      expect(elapsed { ev.run }).to be < 1
      expect(woken).to eq([nil, nil])
    end

    it "#wait(timeout:) returns nil when nobody signals in time; a signal is not remembered", timing: true do
      condition = Evix::Condition.new
      result = :not_set
      took = nil
      ev.spawn do
        condition.signal(:too_early) # nobody waits: lost
        t0 = mono
        result = condition.wait(timeout: 0.05)
        took = mono - t0
      end
      ev.run
      expect(result).to be_nil
      expect(took).to be_between(0.04, 0.5)
      expect(condition.waiting?).to be(false)
    end

    it "a cancelled waiter stops waiting; a later signal goes to the next one" do
      condition = Evix::Condition.new
      woken = []
      first = ev.spawn { woken << [:first, condition.wait] }
      ev.spawn { woken << [:second, condition.wait] }
      ev.spawn do
        ev.sleep(0.01)
        first.cancel
        ev.sleep(0)
        condition.signal(:go)
        ev.sleep(0)
      end
      ev.run
      expect(woken).to eq([%i[second go]])
      expect(condition.waiting?).to be(false)
      expect { first.wait }.to raise_error(Evix::CancelledError)
    end

    it "works between Fiber.schedule fibers under Evix.run, while other fibers keep running" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          condition = Evix::Condition.new
          ticks = 0
          got = nil
          Fiber.schedule { got = condition.wait }
          Fiber.schedule do
            5.times do
              sleep 0.005
              ticks += 1
            end
            condition.broadcast(:ready)
          end
          sleep 0.005 until got
          [got, ticks]
        end
        expect(result).to eq([:ready, 5]), "#{backend}: #{result.inspect}"
      end
    end
  end

  # Ruby's own primitives under Evix.run: these pass today (the scheduler's block and
  # unblock hooks); they guard the rewrite of the waiting model.
  describe "Ruby's Queue, Mutex and ConditionVariable under Evix.run" do
    it "Queue carries items between fibers and from another thread, while other fibers keep running",
       timing: true do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          queue = Thread::Queue.new
          got = []
          ticks = 0
          consumer = Fiber.schedule { 4.times { got << queue.pop } }
          Fiber.schedule do
            2.times do |i|
              sleep 0.01
              queue << [:fiber, i]
            end
          end
          Thread.new do
            sleep 0.05
            2.times { |i| queue << [:thread, i] }
          end
          while consumer.alive?
            sleep 0.005
            ticks += 1
          end
          [got, ticks >= 3]
        end
        expect(result).to eq([[[:fiber, 0], [:fiber, 1], [:thread, 0], [:thread, 1]], true]),
                          "#{backend}: #{result.inspect}"
      end
    end

    it "Mutex serialises fibers that sleep while holding it, and a thread waiting for it" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          mutex = Thread::Mutex.new
          log = []
          fibers = Array.new(3) do |i|
            Fiber.schedule do
              mutex.synchronize do
                log << [:in, i]
                sleep 0.01
                log << [:out, i]
              end
            end
          end
          thread = Thread.new do
            sleep 0.005
            mutex.synchronize { log << %i[thread in] }
          end
          sleep 0.005 while fibers.any?(&:alive?)
          thread.join
          # every fiber's [:in, i] is followed at once by its [:out, i]: nobody got in between
          held = log.each_index.select { |k| log[k][0] == :in }.all? { |k| log[k + 1] == [:out, log[k][1]] }
          [held, log.size]
        end
        expect(result).to eq([true, 7]), "#{backend}: #{result.inspect}"
      end
    end

    it "ConditionVariable wakes a fiber signalled by another fiber and by another thread" do
      Evix.backends.each do |backend|
        result = evix_run_in_child(backend) do
          mutex = Thread::Mutex.new
          cv = Thread::ConditionVariable.new
          ready = []
          got = []
          waiter = Fiber.schedule do
            mutex.synchronize do
              cv.wait(mutex) while ready.empty?
              got << ready.shift
              cv.wait(mutex) while ready.empty?
              got << ready.shift
            end
          end
          Fiber.schedule do
            sleep 0.01
            mutex.synchronize do
              ready << :from_fiber
              cv.signal
            end
          end
          Thread.new do
            sleep 0.05
            mutex.synchronize do
              ready << :from_thread
              cv.signal
            end
          end
          sleep 0.005 while waiter.alive?
          got
        end
        expect(result).to eq(%i[from_fiber from_thread]), "#{backend}: #{result.inspect}"
      end
    end
  end
end
