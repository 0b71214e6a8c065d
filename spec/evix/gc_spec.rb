# frozen_string_literal: true

require "spec_helper"

RSpec.describe "Evix::Loop and the GC" do
  # Collect what earlier examples left first: finalizers that run Ruby code
  # (each Tempfile has one) would otherwise run under stress, a full GC per
  # allocation; on Ruby 3.3 in a big heap that took over 10 s.
  def under_gc_stress
    GC.start
    GC.stress = true
    yield
  ensure
    GC.stress = false
  end

  # Registers callbacks whose closures are referenced only by the loop; the
  # strings and arrays they capture are built here and dropped on return.
  def register_everything(evloop, log, reader)
    captured = Array.new(3) { |i| ["tick-#{i}", [i, "payload-#{i}" * 3]] }
    evloop.next_tick { log << [:next_tick, captured[0]] }
    evloop.defer { log << [:defer, captured[1]] }
    timer_data = { name: "timer", list: %w[a b c].map(&:dup) }
    evloop.add_timer(0) { log << [:timer, timer_data] }
    io_data = +"io-" << ("x" * 10)
    evloop.add_io(reader, Evix::READ | Evix::ONESHOT) { |events| log << [:io, io_data, events] }
    nil
  end

  # The closure's captured data is referenced only by the loop once this returns.
  def add_repeating_timer(evloop, seen)
    data = ["repeat", [1, 2, 3]]
    timer = evloop.add_timer(0.001, repeat: 0.001) do
      seen << data.dup
      timer.cancel if seen.size == 3
    end
    nil
  end

  # Handles on a loop that nothing else references.
  def handles_on_a_dropped_loop(backend, reader)
    evloop = Evix::Loop.new(backend: backend)
    [evloop.add_timer(10) {}, evloop.add_io(reader, Evix::READ) {}]
  end

  def expected_log
    captured = Array.new(3) { |i| ["tick-#{i}", [i, "payload-#{i}" * 3]] }
    [
      [:next_tick, captured[0]],
      [:io, "io-xxxxxxxxxx", Evix::READ],
      [:timer, { name: "timer", list: %w[a b c] }],
      [:defer, captured[1]]
    ]
  end

  def garbage
    Array.new(2_000) { |i| "garbage-#{i}" }
    nil
  end

  Evix.backends.each do |backend|
    describe "backend #{backend}" do
      let!(:ev) { new_loop(backend) }

      it "keeps next_tick, defer, timer and watcher closures alive under GC.stress" do
        r, w = pipe
        w.write("x")
        log = []
        under_gc_stress do
          register_everything(ev, log, r)
          GC.start
          ev.run_once(1)
        end
        expect(log).to eq(expected_log)
      end

      it "keeps a repeating timer's closure alive under GC.stress" do
        seen = []
        under_gc_stress do
          add_repeating_timer(ev, seen)
          GC.start
          ev.run
        end
        expect(seen).to eq([["repeat", [1, 2, 3]]] * 3)
      end

      it "keeps posted blocks alive under GC.stress" do
        log = []
        Thread.new do
          3.times do |i|
            payload = "posted-#{i}" * 2
            ev.post { log << payload }
          end
        end.join
        under_gc_stress do
          GC.start
          ev.run_once(1)
        end
        expect(log).to eq(Array.new(3) { |i| "posted-#{i}" * 2 })
      end

      it "keeps an IO referenced only by its watcher open" do
        w = nil
        got = []
        under_gc_stress do
          reader, w = IO.pipe
          ev.add_io(reader, Evix::READ | Evix::ONESHOT) { |events| got << events }
          reader = nil # rubocop:disable Lint/UselessAssignment
          GC.start
          GC.start
        end
        track_io(w)
        w.write("x")
        ev.run_once(1)
        expect(got).to eq([Evix::READ])
      end

      it "keeps timers and their handles consistent under GC.stress" do
        log = []
        under_gc_stress do
          timers = Array.new(3) { |i| ev.add_timer(0.001 * i) { log << i } }
          timers[1].cancel
          GC.start
          timers[2].again(0.002)
          ev.run
        end
        expect(log).to eq([0, 2])
      end

      it "lets handles outlive a loop that only they reference" do
        r, = pipe
        timer, watcher = handles_on_a_dropped_loop(backend, r)
        under_gc_stress do
          GC.start
          timer.active?
          watcher.active?
          timer.cancel
          watcher.cancel
        end
        expect(timer.active?).to be(false)
        expect(watcher.active?).to be(false)
      end

      if GC.respond_to?(:compact)
        # Compacted in a forked child, where the calling thread is the only
        # one: Ruby 3.1.2's compaction check reads one word past the top of
        # every thread's VM stack (fixed upstream in ruby/ruby#7081), and
        # crashed the whole suite when another thread's held a stale pointer
        # (a core dump showed it, three times in this example).
        it "keeps captured data intact across GC.compact" do
          log = in_child do
            evloop = new_loop(backend)
            r, w = IO.pipe
            w.write("x")
            log = []
            garbage
            register_everything(evloop, log, r)
            garbage
            compact_heap
            evloop.run_once(1)
            log
          end
          expect(log).to eq(expected_log)
        end

        it "keeps timers, watchers and handles working after GC.compact" do
          log, active = in_child do
            evloop = new_loop(backend)
            r, w = IO.pipe
            log = []
            handles = Array.new(20) do |i|
              text = "timer-#{i}"
              evloop.add_timer(0.001) { log << text }
            end
            handles.each_with_index { |timer, i| timer.cancel if i.odd? }
            watcher = evloop.add_io(r, Evix::READ) do |events|
              log << events
              r.read_nonblock(10)
            end
            garbage
            compact_heap
            w.write("x")
            evloop.run_once(1)
            watcher.cancel
            evloop.run
            [log, handles.map(&:active?)]
          end
          expect(log.first).to eq(Evix::READ)
          expect(log.drop(1)).to eq((0...20).step(2).map { |i| "timer-#{i}" })
          expect(active).to all(be(false))
        end
      end
    end
  end
end
