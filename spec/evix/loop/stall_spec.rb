# frozen_string_literal: true

require "spec_helper"
require "socket"

RSpec.describe "Seeing a stalled loop: Evix::Loop#on_stall and #tasks" do
  def clock
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Holds the loop (and the GVL, bar Ruby's thread switches) for +seconds+.
  def spin_busily(seconds)
    deadline = clock + seconds
    nil while clock < deadline
  end

  # The reports a watchdog delivered, as data a child can send back.
  def drain(reports)
    Array.new(reports.size) do
      report = reports.pop
      { duration: report.duration, task: report.task, backtrace: report.backtrace }
    end
  end

  def watchdogs
    Thread.list.count { |thread| thread.name == "evix stall watchdog" && thread.alive? }
  end

  describe "#on_stall" do
    it "reports a plain callback that holds the loop 600 ms once, with no task and the busy method in its backtrace" do
      reports = in_child(timeout: 10) do
        ev = Evix::Loop.new
        reports = Queue.new
        ev.on_stall(100) { |report| reports << report }
        ev.next_tick { spin_busily(0.6) }
        ev.run
        ev.close # joins the watchdog: a report under way is delivered first
        drain(reports)
      end
      expect(reports.size).to eq(1), reports.map { |r| r[:duration] }.inspect
      expect(reports[0][:task]).to be_nil
      expect(reports[0][:duration]).to be >= 0.1
      expect(reports[0][:backtrace]).to include(a_string_matching(/in [`'](?:\S+[#.])?spin_busily'/))
    end

    it "names the task whose fiber holds the loop" do
      result = in_child(timeout: 10) do
        ev = Evix::Loop.new
        reports = Queue.new
        ev.on_stall(100) { |report| reports << report }
        task = ev.spawn { spin_busily(0.6) }
        ev.run
        ev.close
        report = reports.pop
        [reports.size, report.task.equal?(task), report.backtrace.grep(/spin_busily/).size]
      end
      expect(result).to eq([0, true, 1])
    end

    it "sees a callback blocked in a system call (the GVL released) too" do
      reports = in_child(timeout: 10) do
        ev = Evix::Loop.new
        reports = Queue.new
        ev.on_stall(100) { |report| reports << report }
        ev.next_tick { Kernel.sleep(0.6) } # a blocking sleep: no scheduler here
        ev.run
        ev.close
        drain(reports)
      end
      expect(reports.size).to eq(1)
      expect(reports[0][:backtrace].first).to match(/in [`'](?:Kernel[#.])?sleep'/)
    end

    it "never reports fibers that sleep cooperatively or give the loop back often" do
      reports = in_child(timeout: 10) do
        ev = Evix::Loop.new
        reports = Queue.new
        ev.on_stall(300) { |report| reports << report }
        ev.spawn { 3.times { ev.sleep(0.4) } }
        # 20 ms of work at a time, 600 ms in all: never 300 ms in one go, even
        # with a GC or a preemption in between.
        ev.spawn do
          30.times do
            spin_busily(0.02)
            ev.sleep(0)
          end
        end
        ev.run
        ev.close
        drain(reports)
      end
      expect(reports).to eq([])
    end

    it "reports two separate stalls twice" do
      reports = in_child(timeout: 10) do
        ev = Evix::Loop.new
        reports = Queue.new
        ev.on_stall(100) { |report| reports << report }
        ev.next_tick { spin_busily(0.6) }
        ev.add_timer(0.9) { spin_busily(0.6) }
        ev.run
        ev.close
        drain(reports)
      end
      expect(reports.size).to eq(2)
      expect(reports).to all(include(duration: be >= 0.1))
    end

    it "returns a handle whose cancel ends the watchdog thread; nil, a new on_stall and close end it too" do
      result = in_child(timeout: 10) do
        ev = Evix::Loop.new
        watch = ev.on_stall(50) { |_report| nil }
        steps = [watch.active?, watchdogs]
        watch.cancel
        watch.cancel # idempotent
        steps += [watch.active?, watchdogs]
        first = ev.on_stall(50) { |_report| nil }
        second = ev.on_stall(70) { |_report| nil }
        steps += [first.active?, second.active?, watchdogs]
        steps << ev.on_stall(nil)
        steps += [second.active?, watchdogs]
        ev.on_stall(50) { |_report| nil }
        ev.close
        steps << watchdogs
      end
      expect(result).to eq([true, 1, false, 0, false, true, 1, nil, false, 0, 0])
    end

    it "delivers nothing after cancel, even during a stall" do
      count = in_child(timeout: 10) do
        ev = Evix::Loop.new
        reports = Queue.new
        watch = ev.on_stall(100) { |report| reports << report }
        ev.next_tick do
          watch.cancel
          spin_busily(0.6)
        end
        ev.run
        ev.close
        reports.size
      end
      expect(count).to eq(0)
    end

    it "ends its watchdog thread when the loop is garbage collected" do
      left = in_child(timeout: 10) do
        make = -> { Evix::Loop.new.on_stall(50) { |_report| nil } }
        make.call
        20.times do
          GC.start
          break if watchdogs.zero?

          sleep 0.05
        end
        watchdogs
      end
      expect(left).to eq(0)
    end

    it "ends the watchdog of a dropped loop whose block holds that loop, and frees the loop's descriptors" do
      left = in_child(timeout: 20) do
        fds = -> { Dir.children("/proc/self/fd").size }
        before = fds.call
        make = lambda do
          ev = Evix::Loop.new
          ev.on_stall(1000) { |_report| ev.print_tasks }
          nil
        end
        50.times { make.call } # (a GC meanwhile may collect some already)
        40.times do
          GC.start
          break if watchdogs < 3

          sleep 0.05
        end
        [watchdogs, fds.call - before]
      end
      running, fds = left
      expect(running).to be < 3 # a loop the stack still references may stay
      expect(fds).to be < 10
    end

    it "does not keep the process alive" do
      run = run_ruby(<<~RUBY, timeout: 10)
        ev = Evix::Loop.new
        ev.on_stall(1000) { |_report| nil }
        puts :done
      RUBY
      expect(run.success?).to be(true), run.err
      expect(run.out).to eq("done\n")
    end

    it "keeps a report's exception to a line on stderr and goes on watching" do
      run = run_ruby(<<~RUBY, timeout: 10)
        def spin(seconds)
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
          nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        end
        ev = Evix::Loop.new
        reports = 0
        ev.on_stall(100) { |_report| reports += 1; raise "broken reporter" }
        ev.next_tick { spin(0.6) }
        ev.add_timer(0.9) { spin(0.6) }
        ev.run
        ev.close
        puts reports
      RUBY
      expect(run.success?).to be(true), run.err
      expect(run.out).to eq("2\n")
      expect(run.err.scan("broken reporter").size).to eq(2)
    end

    it "survives fork: the child's inherited handle is inactive, its new loop is watched, the parent goes on" do
      result = in_child(timeout: 15) do
        ev = Evix::Loop.new
        reports = Queue.new
        watch = ev.on_stall(100) { |report| reports << report }
        child = nil
        ev.next_tick do
          child = in_child do
            inherited = [watch.active?, watchdogs]
            refused = begin
              ev.on_stall(100) { |_report| nil }
            rescue Evix::Error => e
              e.message
            end
            fresh = Evix::Loop.new
            own = Queue.new
            fresh.on_stall(100) { |report| own << report }
            fresh.next_tick { spin_busily(0.6) }
            fresh.run
            fresh.close
            [inherited, refused, own.size]
          end
        end
        ev.add_timer(0.1) { spin_busily(0.6) }
        ev.run
        ev.close
        [child, reports.size]
      end
      (inherited, refused, own), parent_reports = result
      expect(inherited).to eq([false, 0])
      expect(refused).to match(/fork/)
      expect(own).to eq(1)
      # The parent's fork callback itself waited for the child's 600 ms stall.
      expect(parent_reports).to eq(2)
    end

    it "rejects a threshold that is not a positive number of milliseconds, or a missing block" do
      ev = Evix::Loop.new
      [0, -5, "100", :fast, Float::NAN, Float::INFINITY, Complex(1, 1), 1e300].each do |bad|
        expect { ev.on_stall(bad) { |_report| nil } }.to raise_error(ArgumentError, /milliseconds/), bad.inspect
      end
      expect { ev.on_stall(100) }.to raise_error(ArgumentError, /block/)
      # Below a nanosecond, the watchdog's resolution: refused with the value given.
      [1e-9, 5e-7].each do |tiny|
        expect { ev.on_stall(tiny) { |_report| nil } }
          .to raise_error(ArgumentError, /milliseconds.*\(got #{Regexp.escape(tiny.inspect)}\)/)
      end
      expect(ev.on_stall(1e-6) { |_report| nil }.cancel).to be_nil
      expect(watchdogs).to eq(0)
    ensure
      ev&.close
    end
    it "watches through an Evix::StallProbe, which checks its loop and threshold" do
      ev = Evix::Loop.new
      expect { Evix::StallProbe.new(:loop, 0.1) }.to raise_error(TypeError, /Evix::Loop/)
      [0, -1].each do |bad|
        expect { Evix::StallProbe.new(ev, bad) }.to raise_error(ArgumentError, /threshold/), bad.inspect
      end
      probe = Evix::StallProbe.new(ev, 0.05)
      expect(probe.state).to be_a(Integer)
      probe.stop
      expect(probe.wait(nil)).to be_nil # stopped: no stall is waited for
      ev.close
      expect { Evix::StallProbe.new(ev, 0.1) }.to raise_error(Evix::ClosedError)
    ensure
      ev&.close
    end
  end

  describe "#tasks" do
    it "lists live tasks with their state, what each waits on, and an age that grows" do
      result = in_child(timeout: 10) do
        ev = Evix::Loop.new
        listener = TCPServer.new("127.0.0.1", 0)
        client = TCPSocket.new("127.0.0.1", listener.addr[1])
        peer = listener.accept
        reader = ev.spawn { ev.wrap(peer).read }
        sleeper = ev.spawn { ev.sleep(5) }
        joiner = ev.spawn { sleeper.wait }
        finished = ev.spawn { :done }
        lister = nil
        lister = ev.spawn do
          ev.sleep(0.05)
          first = ev.tasks
          ev.sleep(0.1)
          second = ev.tasks
          [reader, sleeper, joiner].each(&:cancel)
          name = { reader => :reader, sleeper => :sleeper, joiner => :joiner, lister => :lister }
          describe = lambda do |info|
            wait = info.waiting
            [name.fetch(info.task), info.state, wait&.kind, wait&.fd, wait&.events, wait&.timeout, info.age]
          end
          [first.map(&describe), second.map(&describe), first.map(&:to_s), finished.alive?]
        end
        ev.run
        after = ev.tasks
        ev.close
        [lister.wait, peer.fileno, after.size].tap { [client, peer, listener].each(&:close) }
      end
      (first, second, lines, finished_alive), fd, left = result
      expect(finished_alive).to be(false)
      expect(first.map(&:first)).to eq(%i[reader sleeper joiner lister])
      reader, sleeper, joiner, lister = first
      expect(reader[1..5]).to eq([:running, :io, fd, :read, nil])
      expect(sleeper[1..4]).to eq([:running, :timer, nil, nil])
      expect(sleeper[5]).to be_between(4, 5)
      expect(joiner[1..5]).to eq([:running, :suspend, nil, nil, nil])
      expect(lister[1..5]).to eq([:running, nil, nil, nil, nil])
      first.zip(second).each { |before, later| expect(later.last).to be > before.last }
      expect(lines[0]).to include("fd #{fd}").and include("read")
      expect(lines[1]).to include("timer")
      expect(left).to eq(0)
    end

    it "is refused on a closed loop" do
      ev = Evix::Loop.new
      ev.close
      expect { ev.tasks }.to raise_error(Evix::ClosedError)
    end
  end

  describe "exe/evix and Evix.run" do
    it "prints the task list on SIGQUIT and keeps serving" do
      ExampleProcess.run("echo") do |server|
        client = server.connect
        client.puts("one")
        expect(client.gets).to eq("one")
        server.signal(:QUIT)
        deadline = LineSocket.now + 5
        sleep 0.02 until server.stderr.include?("waits for fd") || LineSocket.now > deadline
        expect(server.stderr).to match(/evix: \d+ live tasks?/).and match(/waits for fd \d+ \(read\)/)
        client.puts("two")
        expect(client.gets).to eq("two")
      end
    end

    it "reports stalls of Evix.run's fibers on stderr when EVIX_STALL_MS is set" do
      run = run_ruby(<<~RUBY, timeout: 10, env: { "EVIX_STALL_MS" => "100" })
        def spin_for_env(seconds)
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
          nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        end
        Evix.run do
          Fiber.schedule { sleep 0.05 }
          spin_for_env(0.6)
        end
        puts :ok
      RUBY
      expect(run.success?).to be(true), run.err
      expect(run.out).to eq("ok\n")
      expect(run.err.scan(/evix: loop stalled for \d+ ms in #<Evix::Task/).size).to eq(1), run.err
      expect(run.err).to match(/in [`'](?:Object#)?spin_for_env'/)
    end

    it "rejects a bad EVIX_STALL_MS at Evix.run, and in exe/evix" do
      run = run_ruby("begin; Evix.run { 1 }; rescue ArgumentError => e; puts e.message; end",
                     env: { "EVIX_STALL_MS" => "soon" })
      expect(run.out).to include("EVIX_STALL_MS must be a positive number of milliseconds, at most 86400000") &
                         include('(got "soon")')
      _out, err, status = Open3.capture3({ "EVIX_STALL_MS" => "-1" }, RbConfig.ruby, "-I",
                                         File.join(ExampleProcess::ROOT, "lib"), ExampleProcess::EXE,
                                         "echo", "--port", "0")
      expect(status.exitstatus).to eq(2)
      expect(err).to include("evix: EVIX_STALL_MS must be a positive number of milliseconds")
    end
  end
end
