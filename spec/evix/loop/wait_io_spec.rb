# frozen_string_literal: true

require "spec_helper"

RSpec.describe "Evix::Loop#wait_io, #suspend and #release_io" do
  let!(:ev) { new_loop }

  def in_task(&)
    task = ev.spawn(&)
    ev.run
    task.wait
  end

  it "suspends the fiber until the IO is ready and returns the ready bits" do
    r, w = pipe
    ev.add_timer(0.02) { w.write("x") }
    expect(in_task { ev.wait_io(r, Evix::READ) }).to eq(Evix::READ)
    expect(ev.stats[:watchers]).to eq(0)
  end

  it "returns nil when the timeout passes first and leaves no timer behind", timing: true do
    r, = pipe
    took = elapsed { expect(in_task { ev.wait_io(r, Evix::READ, 0.05) }).to be_nil }
    expect(took).to be_between(0.04, 1)
    expect(ev.stats).to include(watchers: 0, timers: 0)
  end

  it "ends the wait when something is raised into the fiber, and its watcher never fires later" do
    r, w = pipe
    fired = []
    task = ev.spawn do
      fired << ev.wait_io(r, Evix::READ)
    rescue EvixSpecError
      fired << :interrupted
    end
    ev.run_once(0)
    ev.next_tick { ev.interrupt(task.fiber, EvixSpecError.new) }
    ev.run
    w.write("x")
    ev.run_once(0.02)
    expect(fired).to eq(%i[interrupted])
    expect(ev.stats).to include(watchers: 0, waiters: 0)
  end

  it "waits on the same IO again without losing readiness" do
    r, w = pipe
    got = in_task do
      3.times.map do
        ev.next_tick { w.write("y") }
        ev.wait_io(r, Evix::READ).tap { r.read_nonblock(1) }
      end
    end
    expect(got).to eq([Evix::READ] * 3)
  end

  it "rejects bad events, bad IOs and closed IOs at the call" do
    r, = pipe
    errors = in_task do
      [[r, 0], [r, 8], ["no", Evix::READ]].map do |io, events|
        ev.wait_io(io, events)
      rescue ArgumentError, TypeError => e
        e.class
      end
    end
    expect(errors).to eq([ArgumentError, ArgumentError, TypeError])
    r.close
    expect { in_task { ev.wait_io(r, Evix::READ) } }.to raise_error(Evix::ClosedError)
  end

  it "takes an IO, an object whose to_io is one, or an fd, and raises for a closed socket or a bare IO" do
    r, w = pipe
    w.write("x")
    holder = Struct.new(:to_io).new(r)
    expect(in_task { [ev.wait_io(r, Evix::READ), ev.wait_io(holder, Evix::READ), ev.wait_io(r.fileno, Evix::READ)] })
      .to eq([Evix::READ] * 3)
    a, = socket_pair
    a.close
    expect { in_task { ev.wait_io(a, Evix::READ) } }.to raise_error(Evix::ClosedError)
    expect { in_task { ev.wait_io(IO.allocate, Evix::READ) } }.to raise_error(IOError)
    expect(ev.stats[:watchers]).to eq(0)
  end

  it "checks its arity like a Ruby method" do
    r, = pipe
    expect { ev.wait_io(r) }.to raise_error(ArgumentError, "wrong number of arguments (given 1, expected 2..3)")
    expect { ev.wait_io(r, Evix::READ, 1, 2) }
      .to raise_error(ArgumentError, "wrong number of arguments (given 4, expected 2..3)")
    expect { ev.suspend(1, 2) }.to raise_error(ArgumentError, "wrong number of arguments (given 2, expected 0..1)")
  end

  it "cannot suspend the root fiber and cleans up after the attempt" do
    r, = pipe
    expect { ev.wait_io(r, Evix::READ) }.to raise_error(Evix::Error, /inside a task/)
    expect(ev.stats).to include(watchers: 0, waiters: 0)
  end

  it "suspend returns what resumed the fiber, or nil after the timeout, and leaves no timer", timing: true do
    got = []
    token = nil
    ev.spawn do
      got << ev.suspend { |t| token = t }
      got << ev.suspend(0.01)
    end
    ev.run_once(0)
    ev.next_tick { expect(ev.resume(token, :hello)).to be(true) }
    took = elapsed { ev.run }
    expect(got).to eq([:hello, nil])
    expect(ev.resume(token, :late)).to be(false)
    expect(took).to be_between(0.005, 1)
    expect(ev.stats[:timers]).to eq(0)
    expect { in_task { ev.suspend(-1) } }.to raise_error(ArgumentError, /timeout/)
    expect { ev.suspend(0) }.to raise_error(Evix::Error, /inside a task/)
  end

  it "release_io removes the IO's watchers so none fires after the IO is closed" do
    r, w = pipe
    fired = []
    watcher = ev.add_io(r, Evix::READ) { fired << :io }
    w.write("x")
    ev.release_io(r)
    expect(watcher.active?).to be(false)
    ev.run_once(0.02)
    expect(fired).to eq([])
    expect { ev.release_io("not an io") }.to raise_error(TypeError)
  end
end
