# frozen_string_literal: true

require "spec_helper"

RSpec.describe Evix::Timer do
  it "cannot be constructed by users" do
    expect { described_class.new }.to raise_error(StandardError) do |e|
      expect(e).to be_a(NoMethodError).or be_a(TypeError)
    end
  end

  Evix.backends.each do |backend|
    describe "on a #{backend} loop" do
      let!(:ev) { new_loop(backend) }

      describe "#cancel" do
        it "prevents the block from running and returns nil" do
          ran = false
          timer = ev.add_timer(0.01) { ran = true }
          expect(timer.cancel).to be_nil
          ev.run
          expect(ran).to be(false)
          expect(ev.stats[:timers]).to eq(0)
        end

        it "is idempotent, also on a fired timer" do
          count = 0
          timer = ev.add_timer(0) { count += 1 }
          ev.run
          expect(timer.cancel).to be_nil
          expect(timer.cancel).to be_nil
          expect(count).to eq(1)
        end

        it "cancels only its own timer" do
          log = []
          a = ev.add_timer(0.01) { log << :a }
          ev.add_timer(0.01) { log << :b }
          ev.add_timer(0.01) { log << :c }
          a.cancel
          ev.run
          expect(log).to eq(%i[b c])
        end

        it "cancels another timer due in the same timer phase" do
          log = []
          second = nil
          ev.add_timer(0) do
            log << :first
            second.cancel
          end
          second = ev.add_timer(0) { log << :second }
          ev.run
          expect(log).to eq([:first])
        end

        it "stops a repeating timer from inside its block", timing: true do
          count = 0
          timer = ev.add_timer(0, repeat: 0.005) do
            count += 1
            timer.cancel if count == 2
          end
          expect(elapsed { ev.run }).to be < 1
          expect(count).to eq(2)
        end
      end

      describe "#active?" do
        it "is true while pending and false after firing" do
          timer = ev.add_timer(0) {}
          expect(timer.active?).to be(true)
          ev.run
          expect(timer.active?).to be(false)
        end

        it "is false inside a one-shot timer's block and true inside a repeating timer's block" do
          inside = {}
          once = ev.add_timer(0) { inside[:once] = once.active? }
          repeating = ev.add_timer(0, repeat: 0.01) do
            inside[:repeating] = repeating.active?
            repeating.cancel
          end
          ev.run
          expect(inside).to eq(once: false, repeating: true)
        end

        it "is false after cancel" do
          timer = ev.add_timer(10) {}
          timer.cancel
          expect(timer.active?).to be(false)
        end
      end

      describe "#ref, #unref and #ref?" do
        it "is referenced by default" do
          expect(ev.add_timer(1) {}.ref?).to be(true)
        end

        it "returns self from unref and ref and toggles ref?" do
          timer = ev.add_timer(1) {}
          expect(timer.unref).to equal(timer)
          expect(timer.ref?).to be(false)
          expect(timer.ref).to equal(timer)
          expect(timer.ref?).to be(true)
        end

        it "lets run return while only an unref'd timer is pending", timing: true do
          ran = false
          ev.add_timer(2) { ran = true }.unref
          expect(elapsed { ev.run }).to be < 0.5
          expect(ran).to be(false)
        end

        it "keeps run alive again after ref" do
          ran = false
          started = now # from before add_timer: under GC.stress unref/ref alone take milliseconds
          timer = ev.add_timer(0.03) { ran = true }
          timer.unref
          timer.ref
          ev.run
          expect(ran).to be(true)
          expect(now - started).to be >= 0.029
        end

        it "keeps the unref'd state across again", timing: true do
          timer = ev.add_timer(0) {}.unref
          timer.again(2)
          expect(timer.ref?).to be(false)
          expect(elapsed { ev.run }).to be < 0.5
        end
      end

      describe "after the loop is closed" do
        it "reports inactive, cancels quietly and refuses again" do
          timer = ev.add_timer(1) {}
          ev.close
          expect(timer.active?).to be(false)
          expect(timer.cancel).to be_nil
          expect { timer.again(1) }.to raise_error(Evix::ClosedError)
        end
      end

      describe "#again" do
        it "returns self" do
          timer = ev.add_timer(1) {}
          expect(timer.again(2)).to equal(timer)
        end

        it "postpones a pending timer", timing: true do
          fired_at = nil
          t0 = now
          timer = ev.add_timer(0.01) { fired_at = now }
          timer.again(0.1)
          ev.run
          expect(fired_at - t0).to be >= 0.095
          expect(fired_at - t0).to be < 0.6
        end

        it "brings a pending timer forward", timing: true do
          fired_at = nil
          t0 = now
          timer = ev.add_timer(3) { fired_at = now }
          timer.again(0.01)
          ev.run
          expect(fired_at - t0).to be < 0.5
        end

        it "reuses the last delay when called without one", timing: true do
          fired_at = nil
          timer = ev.add_timer(0.06) { fired_at = now }
          ev.run
          t0 = now
          timer.again
          ev.run
          expect(fired_at - t0).to be >= 0.055
          expect(fired_at - t0).to be < 0.6
        end

        it "re-arms a fired timer" do
          count = 0
          timer = ev.add_timer(0) { count += 1 }
          ev.run
          timer.again(0)
          expect(timer.active?).to be(true)
          ev.run
          expect(count).to eq(2)
        end

        it "re-arms a cancelled timer" do
          count = 0
          timer = ev.add_timer(0) { count += 1 }
          timer.cancel
          timer.again(0)
          ev.run
          expect(count).to eq(1)
        end

        it "re-arms a one-shot timer from inside its own block" do
          count = 0
          timer = ev.add_timer(0) do
            count += 1
            timer.again(0.005) if count < 3
          end
          ev.run
          expect(count).to eq(3)
          expect(timer.active?).to be(false)
        end

        it "does not add a second timer" do
          timer = ev.add_timer(1) {}
          3.times { timer.again(1) }
          expect(ev.stats[:timers]).to eq(1)
        end
      end
    end
  end
end
