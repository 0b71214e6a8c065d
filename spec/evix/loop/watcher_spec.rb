# frozen_string_literal: true

require "spec_helper"

RSpec.describe Evix::Watcher do
  it "cannot be constructed by users" do
    expect { described_class.new }.to raise_error(StandardError) do |e|
      expect(e).to be_a(NoMethodError).or be_a(TypeError)
    end
  end

  Evix.backends.each do |backend|
    describe "on a #{backend} loop" do
      let!(:ev) { new_loop(backend) }

      describe "#cancel" do
        it "stops further callbacks and returns nil", timing: true do
          r, w = pipe
          w.write("x") # never read: the watcher would fire every iteration
          calls = 0
          watcher = ev.add_io(r, Evix::READ) { calls += 1 }
          ev.run_once(1)
          expect(calls).to eq(1)
          expect(watcher.cancel).to be_nil
          expect(elapsed { ev.run }).to be < 0.5
          expect(calls).to eq(1)
          expect(ev.stats[:watchers]).to eq(0)
        end

        it "is idempotent" do
          r, = pipe
          watcher = ev.add_io(r, Evix::READ) {}
          expect(watcher.cancel).to be_nil
          expect(watcher.cancel).to be_nil
          expect(ev.alive?).to be(false)
        end

        it "works from inside the watcher's own block" do
          _r, w = pipe
          calls = 0
          watcher = ev.add_io(w, Evix::WRITE) do
            calls += 1
            watcher.cancel
          end
          ev.run
          ev.run_once(0.02)
          expect(calls).to eq(1)
        end

        it "is fine after the user closed the fd", timing: true do
          r, w = pipe
          watcher = ev.add_io(r, Evix::READ) {}
          ev.run_once(0)
          r.close
          expect(watcher.cancel).to be_nil
          expect(watcher.active?).to be(false)
          expect(elapsed { ev.run }).to be < 0.5
          # The loop keeps working with new fds (possibly the same number).
          r2, w2 = pipe
          got = []
          other = ev.add_io(r2, Evix::READ) do |events|
            got << events
            other.cancel
          end
          w2.write("x")
          ev.run
          expect(got).to eq([Evix::READ])
          w.close
        end

        it "leaves the user's fd open when cancelled and when the loop closes" do
          evloop = new_loop(backend)
          r, w = pipe
          watcher = evloop.add_io(r, Evix::READ) {}
          evloop.add_io(w, Evix::WRITE) {}
          evloop.run_once(0)
          watcher.cancel
          evloop.close
          w.write("still open")
          expect(r.read_nonblock(100)).to eq("still open")
        end
      end

      describe "after the loop is closed" do
        it "reports inactive and cancels quietly" do
          r, = pipe
          watcher = ev.add_io(r, Evix::READ) {}
          ev.close
          expect(watcher.active?).to be(false)
          expect(watcher.cancel).to be_nil
        end
      end

      describe "#active?" do
        it "is true while registered and false after cancel" do
          r, = pipe
          watcher = ev.add_io(r, Evix::READ) {}
          expect(watcher.active?).to be(true)
          ev.run_once(0)
          expect(watcher.active?).to be(true)
          watcher.cancel
          expect(watcher.active?).to be(false)
        end

        it "stays true inside a persistent watcher's block" do
          _r, w = pipe
          inside = nil
          watcher = ev.add_io(w, Evix::WRITE) do
            inside = watcher.active?
            watcher.cancel
          end
          ev.run
          expect(inside).to be(true)
        end

        it "is false once a ONESHOT watcher has fired" do
          _r, w = pipe
          watcher = ev.add_io(w, Evix::WRITE | Evix::ONESHOT) {}
          expect(watcher.active?).to be(true)
          ev.run
          expect(watcher.active?).to be(false)
        end
      end

      describe "#ref, #unref and #ref?" do
        it "is referenced by default" do
          r, = pipe
          expect(ev.add_io(r, Evix::READ) {}.ref?).to be(true)
        end

        it "returns self from unref and ref and toggles ref?" do
          r, = pipe
          watcher = ev.add_io(r, Evix::READ) {}
          expect(watcher.unref).to equal(watcher)
          expect(watcher.ref?).to be(false)
          expect(watcher.ref).to equal(watcher)
          expect(watcher.ref?).to be(true)
        end

        it "lets run return while only an unref'd watcher is registered", timing: true do
          r, = pipe
          ev.add_io(r, Evix::READ) {}.unref
          expect(elapsed { ev.run }).to be < 0.5
        end

        it "still dispatches an unref'd watcher while the loop runs" do
          r, w = pipe
          got = []
          ev.add_io(r, Evix::READ) { |events| got << events }.unref
          w.write("x")
          ev.add_timer(0.02) {}
          ev.run
          expect(got).not_to be_empty
          expect(got.uniq).to eq([Evix::READ])
        end

        it "keeps run alive again after ref" do
          r, w = pipe
          got = []
          watcher = ev.add_io(r, Evix::READ) do |events|
            got << events
            watcher.cancel
          end
          watcher.unref
          watcher.ref
          # Timed from before the writer starts: under GC.stress getting to
          # run can take longer than the writer's sleep.
          t0 = now
          helper_thread do
            sleep 0.03
            w.write("x")
          end
          ev.run
          expect(got).to eq([Evix::READ])
          expect(now - t0).to be >= 0.02
        end
      end

      describe "#events" do
        {
          "READ" => Evix::READ,
          "WRITE" => Evix::WRITE,
          "READ|WRITE" => Evix::READ | Evix::WRITE,
          "READ|ONESHOT" => Evix::READ | Evix::ONESHOT,
          "WRITE|ONESHOT" => Evix::WRITE | Evix::ONESHOT
        }.each do |label, events|
          it "returns the interest given at creation (#{label})" do
            r, = pipe
            expect(ev.add_io(r, events) {}.events).to eq(events)
          end
        end

        it "is unchanged after the watcher fired and was cancelled" do
          _r, w = pipe
          watcher = ev.add_io(w, Evix::WRITE | Evix::ONESHOT) {}
          ev.run
          expect(watcher.events).to eq(Evix::WRITE | Evix::ONESHOT)
        end
      end
    end
  end
end
