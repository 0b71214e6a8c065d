# frozen_string_literal: true

require "spec_helper"

RSpec.describe "Evix::Loop and fork" do
  Evix.backends.each do |backend|
    describe "backend #{backend}" do
      let!(:ev) { new_loop(backend) }

      {
        "next_tick" => ->(ev, _io) { ev.next_tick {} },
        "defer" => ->(ev, _io) { ev.defer {} },
        "add_timer" => ->(ev, _io) { ev.add_timer(0) {} },
        "add_io" => ->(ev, io) { ev.add_io(io, Evix::READ) {} },
        "post" => ->(ev, _io) { ev.post {} },
        "run" => ->(ev, _io) { ev.run(:nowait) },
        "run_once" => ->(ev, _io) { ev.run_once(0) },
        "stats" => ->(ev, _io) { ev.stats }
      }.each do |name, call|
        it "raises Evix::Error mentioning fork when the parent's loop is used via #{name} in the child" do
          r, = pipe
          ev.add_timer(10) {}
          output = in_child do
            call.call(ev, r)
            "no error"
          rescue Evix::Error => e
            "#{e.class}: #{e.message}"
          end
          expect(output).to start_with("Evix::")
          expect(output).to match(/fork/i)
        end
      end

      it "lets the child call closed? and wakeup on the parent's loop" do
        ev.add_timer(10) {}
        output = in_child { [ev.closed?, ev.wakeup].inspect }
        expect(output).to eq("[false, nil]")
      end

      it "gives the child a working fresh loop" do
        output = in_child do
          child_loop = Evix::Loop.new(backend: backend)
          fired = false
          r, w = IO.pipe
          got = nil
          watcher = child_loop.add_io(r, Evix::READ) do |events|
            got = events
            watcher.cancel
          end
          child_loop.add_timer(0.01) do
            fired = true
            w.write("x")
          end
          child_loop.run
          child_loop.close
          "fired=#{fired} got=#{got}"
        end
        expect(output).to eq("fired=true got=#{Evix::READ}")
      end

      it "keeps the parent's kernel registrations when the child cancels, closes or finalizes the parent's loop" do
        r, w = pipe
        got = []
        watcher = ev.add_io(r, Evix::READ) do |events|
          got << events
          r.read_nonblock(10)
        end
        ev.run_once(0) # the registration is in the kernel now
        output = in_child do
          [-> { watcher.cancel }, -> { ev.close }].each do |call|
            call.call
          rescue Evix::Error
            nil
          end
          "ok"
        end
        expect(output).to eq("ok")
        # A child leaving through exit (not exit!) runs the finalizers of every object.
        pid = fork { ev.stats if ev.closed? }
        expect(wait_child(pid).exitstatus).to eq(0)
        w.write("x")
        ev.run_once(1)
        expect(got).to eq([Evix::READ])
        expect(watcher.active?).to be(true)
      end

      it "keeps the parent's loop working after the child used it and exited" do
        r, w = pipe
        got = []
        watcher = ev.add_io(r, Evix::READ) do |events|
          got << events
          r.read_nonblock(10)
        end
        fired = false
        ev.add_timer(0.02) { fired = true }
        output = in_child do
          begin
            ev.run_once(0)
          rescue Evix::Error
            nil
          end
          w.write("from child") # readiness the parent must see on its own registration
          child_loop = Evix::Loop.new(backend: backend)
          child_loop.add_timer(0) {}
          child_loop.run
          child_loop.close
          "ok"
        end
        expect(output).to eq("ok")
        ev.run_once(1)
        expect(got).to eq([Evix::READ])
        watcher.cancel
        ev.run
        expect(fired).to be(true)
        w.write("y")
        ran = false
        ev.add_io(r, Evix::READ | Evix::ONESHOT) { ran = true }
        ev.run
        expect(ran).to be(true)
      end
    end
  end
end
