# frozen_string_literal: true

require "spec_helper"

RSpec.describe "Evix::Loop#add_signal and #remove_signal" do
  let(:ev) { new_loop }
  let(:usr1) { Signal.list.fetch("USR1") }
  let(:usr2) { Signal.list.fetch("USR2") }

  # USR1/USR2 terminate the process by default: while an example runs they are
  # ignored by a harmless Ruby handler, and a late signal can never kill rspec.
  around do |example|
    noop = proc {}
    saved = %i[USR1 USR2].to_h { |name| [name, Signal.trap(name, noop)] }
    begin
      example.run
    ensure
      sleep 0.02 # lets Ruby run trap handlers for signals still in flight
      saved.each { |name, handler| Signal.trap(name, handler || "DEFAULT") }
    end
  end

  # Sends +signal+ to this process from a helper thread after +delay+, while
  # the loop is blocked waiting.
  def send_later(signal, delay: 0.05)
    helper_thread do
      sleep delay
      Process.kill(signal, Process.pid)
    end
  end

  # A referenced timer so that run waits (the signal watcher is unref'd) and
  # still ends if the signal never gets through.
  def safety_timer(seconds = 3)
    ev.add_timer(seconds) { ev.stop }
  end

  it "runs the block on the loop thread, in normal context, with the signal number", timing: true do
    got = []
    threads = []
    trap_context = nil
    expect(ev.add_signal(:USR1) do |signo|
      got << signo
      threads << Thread.current
      trap_context = begin
        Mutex.new.synchronize {} # raises ThreadError in a trap handler
        false
      rescue ThreadError
        true
      end
      ev.stop
    end).to eq(usr1)
    safety = safety_timer
    send_later(:USR1)
    took = elapsed { ev.run }
    safety.cancel
    expect(got).to eq([usr1])
    expect(threads).to eq([Thread.current])
    expect(trap_context).to be(false)
    expect(took).to be < 1
  end

  it "accepts names with and without SIG, as Symbols or Strings, and numbers" do
    expect(ev.add_signal("SIGUSR1") {}).to eq(usr1)
    expect(ev.add_signal(:SIGUSR2) {}).to eq(usr2)
    expect(ev.remove_signal("USR1")).to be(true)
    expect(ev.add_signal(usr1) {}).to eq(usr1)
    expect(ev.remove_signal(:SIGUSR1)).to be(true)
    expect(ev.remove_signal(usr2)).to be(true)
  end

  it "runs the block for each signal it was given, with that signal's number" do
    got = []
    ev.add_signal(:USR1) { |signo| got << signo }
    ev.add_signal(:USR2) do |signo|
      got << signo
      ev.stop
    end
    safety = safety_timer
    helper_thread do
      sleep 0.03
      Process.kill(:USR1, Process.pid)
      sleep 0.03
      Process.kill(:USR2, Process.pid)
    end
    ev.run
    safety.cancel
    expect(got).to eq([usr1, usr2])
  end

  it "runs the block at least once for signals that arrived before the loop ran" do
    runs = 0
    ev.add_signal(:USR1) { runs += 1 }
    3.times { Process.kill(:USR1, Process.pid) }
    sleep 0.02 # Ruby runs the trap handlers, which only write to the pipe
    expect(runs).to eq(0)
    ev.add_timer(0.05) {}
    ev.run
    expect(runs).to be_between(1, 3)
  end

  it "does not keep run alive: the signal watcher is unref'd", timing: true do
    ev.add_signal(:USR1) {}
    expect(elapsed { ev.run }).to be < 0.5
    expect(ev.alive?).to be(false)
  end

  describe "remove_signal" do
    it "restores the handler that was there before, which runs again" do
      hits = []
      previous = proc { hits << :previous }
      Signal.trap(:USR1, previous)
      ev.add_signal(:USR1) { hits << :evix }
      expect(Signal.trap(:USR1, Signal.trap(:USR1, "IGNORE"))).not_to equal(previous)
      expect(ev.remove_signal(:USR1)).to be(true)
      current = Signal.trap(:USR1, previous)
      expect(current).to equal(previous)
      Process.kill(:USR1, Process.pid)
      wait_until { hits.include?(:previous) }
      ev.add_timer(0.05) {}
      ev.run
      expect(hits).to eq([:previous])
    end

    it "restores the system default when that is what was installed" do
      Signal.trap(:WINCH, "DEFAULT")
      baseline = Signal.trap(:WINCH, "DEFAULT") # what Ruby reports for it
      ev.add_signal(:WINCH) {}
      ev.remove_signal(:WINCH)
      expect(Signal.trap(:WINCH, "DEFAULT")).to eq(baseline)
    end

    it "restores the original handler when add_signal was called twice for one signal", timing: true do
      hits = []
      previous = proc { hits << :previous }
      Signal.trap(:USR1, previous)
      ev.add_signal(:USR1) { hits << :first }
      ev.add_signal(:USR1) { hits << :second }
      ev.add_timer(0.05) {}
      send_later(:USR1, delay: 0.01)
      ev.run
      expect(hits).to eq([:second])
      ev.remove_signal(:USR1)
      expect(Signal.trap(:USR1, previous)).to equal(previous)
    end

    it "leaves fds that the signal pipe's numbers could be reused for free to watch after the last one" do
      ev.add_signal(:USR1) {}
      ev.remove_signal(:USR1)
      pipes = Array.new(2) { pipe }
      refused = pipes.flatten.filter_map do |io|
        ev.add_io(io, Evix::READ) {}.cancel
        nil
      rescue ArgumentError => e
        e.message
      end
      expect(refused).to eq([])
      ev.add_signal(:USR1) { ev.stop }
      Process.kill(:USR1, Process.pid)
      safety = safety_timer
      expect(elapsed { ev.run }).to be < 1
      safety.cancel
    end

    it "returns false for a signal it does not handle" do
      expect(ev.remove_signal(:USR1)).to be(false)
      ev.add_signal(:USR2) {}
      expect(ev.remove_signal(:USR1)).to be(false)
      expect(ev.remove_signal(:USR2)).to be(true)
      expect(ev.remove_signal(:USR2)).to be(false)
    end

    it "stops running the block" do
      runs = 0
      ev.add_signal(:USR1) { runs += 1 }
      ev.add_signal(:USR2) {}
      ev.remove_signal(:USR1)
      Process.kill(:USR1, Process.pid)
      ev.add_timer(0.05) {}
      ev.run
      expect(runs).to eq(0)
    end
  end

  it "restores every handler when the loop is closed" do
    previous = proc {}
    Signal.trap(:USR2, previous)
    ev.add_signal(:USR2) {}
    ev.close
    expect(Signal.trap(:USR2, previous)).to equal(previous)
  end

  # The process-wide trap holds each loop's pipe: a loop dropped without
  # #close must still give its descriptors and the trap back once collected.
  it "frees the pipe and restores the handler of loops dropped without close, once they are collected" do
    outcome = in_child(timeout: 20) do
      # It counts what 1,000 live loops hold, then drops them all: under
      # rake spec:gc_stress every allocation would collect them first (and
      # the run would take minutes).
      GC.stress = false
      fds = -> { Dir.children("/proc/self/fd").size }
      previous = proc {}
      Signal.trap(:USR2, previous)
      before = fds.call
      loops = Array.new(1000) do |i|
        ev = Evix::Loop.new
        ev.add_signal(:USR2) { ev.stop } if i.even? # a block that holds its loop
        ev.add_signal(:USR2) { i } if i.odd?
        ev
      end
      grown = fds.call - before
      loops.clear # dropped without close
      5.times { GC.start }
      [grown, fds.call - before, Signal.trap(:USR2, "DEFAULT").equal?(previous)]
    end
    grown, left, restored = outcome
    expect(grown).to be >= 1000 # each loop had its pipe
    expect(left).to be < 20 # but a few loops still referenced from the stack
    expect(restored).to be(true)
  end

  it "survives a flood of 10,000 signals from another thread and runs the block after the last one", timing: true do
    runs = 0
    last_run = nil
    state = { last_sent_at: nil, marker: false }
    check = -> { ev.stop if state[:marker] && last_run && last_run > state[:last_sent_at] }
    ev.add_signal(:USR2) do
      runs += 1
      last_run = now
      check.call
    end
    safety = safety_timer(8)
    sender = helper_thread do
      pid = Process.pid
      9_999.times { Process.kill(:USR2, pid) }
      state[:last_sent_at] = now
      Process.kill(:USR2, pid)
      ev.post do
        state[:marker] = true
        check.call
      end
      :sent
    end
    expect { ev.run }.not_to raise_error
    safety.cancel
    expect(sender.value).to eq(:sent)
    expect(state[:marker]).to be(true)
    expect(runs).to be >= 1
    expect(last_run).to be > state[:last_sent_at]
  end

  it "propagates an exception raised in the block out of run, and the loop keeps working", timing: true do
    error = EvixSpecError.new("from the signal block")
    line = nil
    ev.add_signal(:USR1) do
      line = __LINE__ + 1
      raise error
    end
    safety = safety_timer
    send_later(:USR1)
    expect { ev.run }.to raise_error(EvixSpecError) { |e|
      expect(e).to equal(error)
      expect(backtrace_includes?(e, __FILE__, line)).to be(true)
    }
    ev.add_signal(:USR1) { ev.stop }
    send_later(:USR1)
    expect(elapsed { ev.run }).to be < 1
    safety.cancel
  end

  it "runs the block in a task of the loop, so it may wait" do
    got = []
    ev.add_signal(:USR1) do
      got << Evix::Task.current.class
      ev.sleep(0.05)
      got << :slept
      ev.stop
    end
    safety = safety_timer
    send_later(:USR1)
    ev.run
    safety.cancel
    expect(got).to eq([Evix::Task, :slept])
  end

  describe "several loops handling one signal (one process-wide trap)" do
    # A loop on its own thread that handles +signal+ by pushing +name+ onto
    # +got+; it runs until it is told to :close (then closes itself) or :stop.
    def loop_thread(name, got, signal: :USR1)
      commands = Queue.new
      ready = Queue.new
      thread = helper_thread do
        evloop = Evix::Loop.new
        evloop.add_signal(signal) { got << name }
        r, w = IO.pipe
        evloop.add_io(r, Evix::READ) { evloop.stop }
        ready << w
        evloop.run
        evloop.remove_signal(signal) if commands.pop == :remove
        evloop.close
        [r, w].each(&:close)
      end
      [thread, ready.pop, commands]
    end

    it "delivers to loops on different threads; ending one keeps the other's handler" do
      got = Queue.new
      a, wake_a, commands_a = loop_thread(:a, got)
      ev.add_signal(:USR1) { |_| got << :main }
      Process.kill(:USR1, Process.pid)
      deadline = now + 3
      ev.run_once(0.05) until got.size >= 2 || now > deadline
      expect([got.pop, got.pop].sort).to eq(%i[a main])
      wake_a.write("!")
      commands_a << :remove
      a.join(2)
      expect(a.alive?).to be(false)
      Process.kill(:USR1, Process.pid)
      ev.add_timer(0.1) {}
      ev.run
      expect(got.pop(true)).to eq(:main)
      expect(got.empty?).to be(true)
    end

    it "restores the handler from before evix only when the last loop stops handling the signal" do
      previous = proc {}
      Signal.trap(:USR1, previous)
      other = new_loop
      ev.add_signal(:USR1) {}
      other.add_signal(:USR1) {}
      ev.remove_signal(:USR1)
      installed = Signal.trap(:USR1, "IGNORE")
      Signal.trap(:USR1, installed)
      expect(installed).not_to equal(previous)
      other.close
      expect(Signal.trap(:USR1, previous)).to equal(previous)
    end

    it "leaves a handler that was trapped over evix's in place when the last loop lets go" do
      mine = proc {}
      ev.add_signal(:USR1) {}
      Signal.trap(:USR1, mine)
      ev.remove_signal(:USR1)
      expect(Signal.trap(:USR1, mine)).to equal(mine)
    end

    it "gives a forked child the handler from before evix, and lets its own loop handle the signal" do
      r, w = pipe
      Signal.trap(:USR2, proc { w.write("previous\n") })
      ev.add_signal(:USR2) { w.write("parent loop\n") }
      pid = fork do
        Process.kill(:USR2, Process.pid)
        sleep 0.05
        child = Evix::Loop.new
        child.add_signal(:USR2) do
          w.write("child loop\n")
          child.stop
        end
        Process.kill(:USR2, Process.pid)
        child.add_timer(2) { child.stop }
        child.run
        exit!(0)
      end
      wait_child(pid)
      ev.add_timer(0.05) {}
      ev.run
      w.close
      expect(r.read.lines).to eq(["previous\n", "child loop\n"])
    end
  end

  describe "bad input" do
    it "raises ArgumentError for an unknown signal" do
      expect { ev.add_signal(:NOPE) {} }.to raise_error(ArgumentError, /NOPE/)
      expect { ev.add_signal("SIGNOPE") {} }.to raise_error(ArgumentError, /NOPE/)
      expect { ev.add_signal(999) {} }.to raise_error(ArgumentError, /999/)
      expect { ev.add_signal(-1) {} }.to raise_error(ArgumentError)
      expect { ev.remove_signal(:NOPE) }.to raise_error(ArgumentError) if ev.add_signal(:USR1) {}
    end

    it "raises TypeError for something that is not a signal name or number" do
      expect { ev.add_signal(1.5) {} }.to raise_error(TypeError, /signal/)
      expect { ev.add_signal(nil) {} }.to raise_error(TypeError, /signal/)
      expect { ev.add_signal([:USR1]) {} }.to raise_error(TypeError, /signal/)
    end

    it "raises ArgumentError without a block and leaves the handler alone" do
      previous = proc {}
      Signal.trap(:USR1, previous)
      expect { ev.add_signal(:USR1) }.to raise_error(ArgumentError, /block/)
      expect(Signal.trap(:USR1, previous)).to equal(previous)
    end

    it "raises Evix::ClosedError on a closed loop" do
      ev.close
      expect { ev.add_signal(:USR1) {} }.to raise_error(Evix::ClosedError)
    end
  end

  describe "from another thread" do
    # The block's exception, raised in a new thread and returned here.
    def in_thread(&block)
      Thread.new do
        Thread.current.report_on_exception = false
        block.call
      end.value
    end

    it "raises Evix::Error for the loop's first add_signal" do
      expect(ev.closed?).to be(false) # the loop belongs to this thread
      expect { in_thread { ev.add_signal(:USR1) {} } }.to raise_error(Evix::Error, /thread/)
    end

    it "raises Evix::Error for add_signal and remove_signal once the loop handles a signal" do
      ev.add_signal(:USR2) {}
      expect { in_thread { ev.add_signal(:USR1) {} } }.to raise_error(Evix::Error, /thread/)
      expect { in_thread { ev.remove_signal(:USR2) } }.to raise_error(Evix::Error, /thread/)
    end
  end

  it "does not run the parent's block for a signal sent to a forked child" do
    runs = 0
    ev.add_signal(:USR1) { runs += 1 }
    pid = fork do
      Process.kill(:USR1, Process.pid)
      sleep 0.05
      exit!(0)
    end
    wait_child(pid)
    ev.add_timer(0.1) {}
    ev.run
    expect(runs).to eq(0)
  end
end
