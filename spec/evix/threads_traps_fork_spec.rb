# frozen_string_literal: true

require "spec_helper"
require "io/wait"

# Threads, traps, fork (docs/architecture.md, "Threads" and "Fork"): a scheduler belongs to the
# thread that installs it; trap handlers may call into a loop blocked in the
# backend; the README's shutdown pattern works; a forked child never runs its
# parent's loop; loops sharing a signal do not disable each other. Each case
# runs in a fresh Ruby with a deadline: a regression may panic, hang or die.
RSpec.describe "Threads, traps and fork" do
  let(:prelude) do
    <<~RUBY
      $stdout.sync = true
      def fds = Dir.children("/proc/self/fd").size
    RUBY
  end

  def run_child(code, backend = nil, timeout: 5)
    env = backend ? { "EVIX_BACKEND" => backend.to_s } : {}
    run_ruby(prelude + code, timeout: timeout, env: env)
  end

  # What must never reach stderr: a Rust panic, Ruby's `fatal`, evix's
  # "internal error".
  def expect_no_crash(run)
    expect(run.timed_out).to be(false), "hung: #{run.err}"
    expect(run.err).not_to match(/panicked|\(fatal\)|internal error/)
    expect(run).to be_success, "exit #{run.status.inspect}: #{run.err}"
  end

  # Starts `ruby -Ilib -revix -e code`, yields [stdout, pid], and kills the
  # process group if it is still running afterwards.
  def with_ruby_process(code, env)
    lib = File.expand_path("../../lib", __dir__)
    command = [RbConfig.ruby, "-I", lib, "-revix", "-e", prelude + code]
    Open3.popen3(env, *command, pgroup: true) do |input, out, err, thread|
      input.close
      errors = Thread.new { err.read }
      begin
        yield out, thread.pid
      ensure
        Process.kill(:KILL, -thread.pid) if thread.join(3).nil?
      end
      [thread.value, errors.value]
    end
  end

  def read_line(io, timeout)
    return unless io.wait_readable(timeout)

    io.gets
  end

  # A loop blocked in run (a 1.5 s timer stops it at the latest); USR1
  # arrives meanwhile and its Signal.trap handler does +action+. Then the loop
  # must still run a timer.
  def trap_run(backend, setup, action, after = "")
    run_child(<<~RUBY, backend)
      evloop = Evix::Loop.new
      r, w = IO.pipe
      #{setup}
      Signal.trap(:USR1) do
        #{action}
        puts "trap ran"
      rescue StandardError => e
        puts "trap raised \#{e.class}"
      end
      Thread.new { sleep 0.2; Process.kill(:USR1, Process.pid) }
      deadline = evloop.add_timer(1.5) { puts "deadline"; evloop.stop }
      evloop.run
      deadline.cancel
      #{after}
      evloop.add_timer(0.01) { puts "still works"; evloop.stop }
      evloop.run
      evloop.close
    RUBY
  end

  Evix.backends.each do |backend|
    describe "a scheduler created on one thread and installed on another (backend #{backend})" do
      # today: every hook raises "belongs to the thread that created it"
      it "runs the hooks on the installing thread" do
        run = run_child(<<~RUBY, backend)
          scheduler = Evix::Scheduler.new
          Thread.new do
            Fiber.set_scheduler(scheduler)
            r, w = IO.pipe
            Fiber.schedule { puts "read \#{r.read(2)}" }
            Fiber.schedule do
              sleep 0.01
              w.write("hi")
            end
            puts "scheduled"
          end.join
          puts "joined"
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["scheduled", "read hi", "joined"])
      end

      # today: close raises on the installing thread and leaks the loop's descriptors
      it "is closed by that thread's exit, which frees its descriptors" do
        run = run_child(<<~RUBY, backend)
          before = fds
          scheduler = Evix::Scheduler.new
          Thread.new { Fiber.set_scheduler(scheduler) }.join
          puts "closed \#{scheduler.loop.closed?}"
          puts "fds \#{fds - before}"
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["closed true", "fds 0"])
      end

      # today: close raises on the installing thread and leaks the loop's descriptors
      it "is closed by Fiber.set_scheduler(nil) on that thread, which frees its descriptors" do
        run = run_child(<<~RUBY, backend)
          before = fds
          scheduler = Evix::Scheduler.new
          Thread.new do
            Fiber.set_scheduler(scheduler)
            Fiber.set_scheduler(nil)
            puts "unset \#{Fiber.scheduler.inspect}"
          end.join
          puts "closed \#{scheduler.loop.closed?}"
          puts "fds \#{fds - before}"
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["unset nil", "closed true", "fds 0"])
      end
    end
  end

  describe "closing a scheduler from inside one of its own fibers" do
    # today: hangs (close runs the loop until the calling fiber ends, which it never does)
    it "raises Evix::Error for Fiber.set_scheduler(nil)" do
      run = run_child(<<~RUBY)
        Fiber.set_scheduler(Evix::Scheduler.new)
        Fiber.schedule do
          Fiber.set_scheduler(nil)
          puts "no error"
        rescue Evix::Error => e
          puts "Evix::Error \#{e.message.empty? ? "without a message" : "with a message"}"
        end
        Fiber.set_scheduler(nil)
        puts "done \#{Fiber.scheduler.inspect}"
      RUBY
      expect_no_crash(run)
      expect(lines(run)).to eq(["Evix::Error with a message", "done nil"])
    end

    # today: hangs (close runs the loop until the calling fiber ends, which it never does)
    it "raises Evix::Error for scheduler.close" do
      run = run_child(<<~RUBY)
        scheduler = Evix::Scheduler.new
        Fiber.set_scheduler(scheduler)
        Fiber.schedule do
          scheduler.close
          puts "no error"
        rescue Evix::Error => e
          puts "Evix::Error \#{e.message.empty? ? "without a message" : "with a message"}"
        end
        Fiber.set_scheduler(nil)
        puts "done \#{Fiber.scheduler.inspect}"
      RUBY
      expect_no_crash(run)
      expect(lines(run)).to eq(["Evix::Error with a message", "done nil"])
    end
  end

  # A TracePoint that passes the GVL at every C call widens the race to
  # certain: one thread switches away in the middle of the first loop's setup.
  # today: deadlocks (one thread holds a lazy class lookup's lock, the other the GVL; only SIGKILL ends it)
  it "never deadlocks when threads create their first Evix::Loop at the same moment (fresh processes)" do
    code = <<~RUBY
      gate = Queue.new
      threads = Array.new(4) do
        Thread.new do
          gate.pop
          evloop = Evix::Loop.new
          r, _w = IO.pipe
          evloop.add_io(r, Evix::READ) {}.cancel
          evloop.add_timer(0) {}
          evloop.run
          evloop.close
        end
      end
      switch = TracePoint.new(:c_call) { Thread.pass }
      switch.enable
      4.times { gate << true }
      threads.each(&:join)
      switch.disable
      puts "ok"
    RUBY
    runs = Array.new(3) { Thread.new { run_child(code, timeout: 4) } }.map(&:value)
    runs.each do |run|
      expect_no_crash(run)
      expect(run.out).to eq("ok\n")
    end
  end

  Evix.backends.each do |backend|
    describe "Signal.trap handlers calling into a loop blocked in the backend (backend #{backend})" do
      # today: Rust panic "RefCell already borrowed" -> fatal
      it "lets the handler call release_io" do
        run = trap_run(backend, "watcher = evloop.add_io(r, Evix::READ) {}",
                       "evloop.release_io(r); evloop.stop")
        expect_no_crash(run)
        expect(lines(run)).to eq(["trap ran", "still works"])
      end

      # today: Rust panic "RefCell already borrowed" -> fatal (or "internal error")
      it "lets the handler call Evix::IO#close; the waiting task gets Evix::ClosedError" do
        run = trap_run(backend, <<~SETUP, "io.close")
          io = evloop.wrap(r)
          evloop.spawn do
            io.read
          rescue Evix::ClosedError
            puts "task: ClosedError"
            evloop.stop
          end
        SETUP
        expect_no_crash(run)
        expect(lines(run)).to eq(["trap ran", "task: ClosedError", "still works"])
      end

      # today: Rust panic "RefCell already borrowed" -> fatal
      it "lets the handler call add_io, and the new watcher fires" do
        run = trap_run(backend, "r2, w2 = IO.pipe; w2.write('x'); evloop.add_io(r, Evix::READ) {}",
                       "evloop.add_io(r2, Evix::READ) { r2.read(1); puts 'r2 ready'; evloop.stop }",
                       "evloop.release_io(r)")
        expect_no_crash(run)
        expect(lines(run)).to eq(["trap ran", "r2 ready", "still works"])
      end

      # today: Rust panic "RefCell already borrowed" -> fatal
      it "lets the handler call wait_io (an error is fine, a crash is not)" do
        run = trap_run(backend, "evloop.add_io(r, Evix::READ) {}",
                       "begin; evloop.wait_io(r, Evix::READ, 0); rescue StandardError; end; evloop.stop",
                       "evloop.release_io(r)")
        expect_no_crash(run)
        expect(lines(run)).to eq(["trap ran", "still works"])
      end

      # today: Rust panic "RefCell already borrowed" -> fatal
      it "lets the handler call add_signal, and that signal is then handled" do
        run = trap_run(backend, "watcher = evloop.add_io(r, Evix::READ) {}", <<~ACTION, "watcher.cancel")
          evloop.add_signal(:USR2) { puts "USR2 handled"; evloop.stop }
          Process.kill(:USR2, Process.pid)
        ACTION
        expect_no_crash(run)
        expect(lines(run)).to eq(["trap ran", "USR2 handled", "still works"])
      end

      # today: Rust panic "RefCell already borrowed" -> fatal
      it "lets the handler call IO#close under Evix.run; the waiting fiber gets IOError" do
        run = run_child(<<~RUBY, backend)
          r, _w = IO.pipe
          Signal.trap(:USR1) do
            r.close
            puts "trap ran"
          end
          Thread.new { sleep 0.2; Process.kill(:USR1, Process.pid) }
          Evix.run do
            Fiber.schedule do
              r.read(1)
            rescue IOError
              puts "fiber: IOError"
              sleep 0.01
              puts "still works"
            end
          end
          puts "run returned"
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["trap ran", "fiber: IOError", "still works", "run returned"])
      end
    end

    describe "the README shutdown pattern (backend #{backend})" do
      # today: the TERM block raises "run/run_once called from inside a callback"
      it "drains a connected client and returns from run on SIGTERM" do
        code = <<~RUBY
          loop = Evix::Loop.new
          server = Evix::TCPServer.new(loop, "127.0.0.1", 0, idle_timeout: 60) do |client|
            while (data = client.read)               # nil at EOF
              client.write(data)                     # writes everything, waiting when the kernel buffer is full
            end
          end
          loop.add_signal(:TERM) { server.shutdown(timeout: 5); loop.stop }
          puts "port \#{server.port}"
          loop.run
          puts "run returned"
        RUBY
        client_saw = nil
        status, err = with_ruby_process(code, { "EVIX_BACKEND" => backend.to_s }) do |out, pid|
          port = Integer(read_line(out, 3).to_s[/\d+/])
          client = TCPSocket.new("127.0.0.1", port)
          client.write("hello")
          echoed = client.readpartial(5) if client.wait_readable(2)
          Process.kill(:TERM, pid)
          eof = client.read if client.wait_readable(3) # the drain closes the connection: EOF
          client_saw = [echoed, eof]
          client.close
          client_saw << read_line(out, 3)
        end
        expect(err).not_to match(/inside a callback|panicked|fatal/)
        expect(client_saw).to eq(["hello", "", "run returned\n"])
        expect(status).to be_success
      end
    end

    describe "fork (backend #{backend})" do
      # today: the child returns into the parent's loop and runs its timers and watchers
      it "never runs the parent's loop in a child forked inside a loop callback" do
        run = run_child(<<~RUBY, backend)
          parent = Process.pid
          who = -> { Process.pid == parent ? "parent" : "child" }
          evloop = Evix::Loop.new
          r, w = IO.pipe
          evloop.add_io(r, Evix::READ) do
            data = r.read_nonblock(100, exception: false)
            puts "\#{who.call} read \#{data.inspect}"
            evloop.stop if who.call == "parent"
          end
          evloop.add_timer(0.05, repeat: 0.05) { puts "child tick" unless who.call == "parent" }
          child = nil
          evloop.add_timer(0.01) do
            child = fork
            Thread.new { sleep 1; exit!(0) } unless child # the child's safety net
          end
          evloop.add_timer(0.3) { w.write("ping") if who.call == "parent" }
          begin
            evloop.run
          rescue StandardError
            exit!(0) unless child
            raise
          end
          exit!(0) unless child
          Process.wait(child)
          puts "parent done"
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(['parent read "ping"', "parent done"])
      end

      # passes today (the child's inherited loop refuses to run)
      it "never runs the parent's fibers in a child forked without a block inside Evix.run" do
        run = run_child(<<~RUBY, backend)
          parent = Process.pid
          who = -> { Process.pid == parent ? "parent" : "child" }
          r, w = IO.pipe
          child = nil
          begin
            Evix.run do
              Fiber.schedule { puts "\#{who.call} read \#{r.read(4).inspect}" }
              Fiber.schedule do
                5.times do
                  sleep 0.05
                  puts "child tick" unless who.call == "parent"
                end
              end
              sleep 0.01 # fork from a fiber the loop resumed
              child = fork
              if child
                Thread.new { sleep 0.3; w.write("ping") }
              else
                Thread.new { sleep 1; exit!(0) } # the child's safety net
              end
            end
          rescue StandardError
            exit!(0) unless child
            raise
          end
          exit!(0) unless child
          Process.wait(child)
          puts "parent done"
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(['parent read "ping"', "parent done"])
      end

      # passes today (the child of a callback has no scheduler set)
      it "lets a child forked inside a loop callback sleep, read a pipe and run a fresh Evix.run" do
        run = run_child(<<~RUBY, backend)
          evloop = Evix::Loop.new
          evloop.add_timer(0.01) do
            pid = fork do
              sleep 0.01
              r, w = IO.pipe
              w.write("p")
              value = Evix.run do
                r2, w2 = IO.pipe
                Fiber.schedule do
                  sleep 0.01
                  w2.write("f")
                end
                r2.read(1)
              end
              puts "child \#{r.read(1)} \#{value}"
              $stdout.flush
              exit!(0)
            end
            _, status = Process.wait2(pid)
            puts "child status \#{status.exitstatus}"
          end
          evloop.run
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["child p f", "child status 0"])
      end

      # today: sleep in the child raises Evix::Error "created before fork"
      it "lets a child forked inside Evix.run sleep, read a pipe and run a fresh Evix.run" do
        run = run_child(<<~RUBY, backend)
          Evix.run do
            pid = fork do
              sleep 0.01
              r, w = IO.pipe
              w.write("p")
              got = r.read(1)
              value = Evix.run do
                r2, w2 = IO.pipe
                Fiber.schedule do
                  sleep 0.01
                  w2.write("f")
                end
                r2.read(1)
              end
              print "child \#{got} \#{value}\n"
            rescue Exception => e
              print "child \#{e.class}: \#{e.message}\n"
            ensure
              $stdout.flush
              exit!(0)
            end
            _, status = Process.wait2(pid)
            puts "child status \#{status.exitstatus}"
          end
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["child p f", "child status 0"])
      end
    end

    describe "two loops handling the same signal (backend #{backend})" do
      # Defines `pump` (runs both loops briefly) and `got` (who handled USR1).
      let(:signal_prelude) do
        <<~RUBY
          $got = []
          def pump(*loops) = 3.times { loops.each { |l| l.run_once(0.02) unless l.closed? } }
          def usr1(*loops)
            $got.clear
            Process.kill(:USR1, Process.pid)
            pump(*loops)
            $got.sort.join(",")
          end
          def pair
            a = Evix::Loop.new
            b = Evix::Loop.new
            a.add_signal(:USR1) { $got << "a" }
            b.add_signal(:USR1) { $got << "b" }
            [a, b]
          end
        RUBY
      end

      # today: only the loop that trapped last runs its block; closing the first loop
      # first restores SIG_DFL and USR1 kills the process
      it "keeps both handlers working, whichever loop is closed first" do
        run = run_child(signal_prelude + <<~RUBY, backend)
          a, b = pair
          puts "both: \#{usr1(a, b)}"
          b.close
          puts "after closing b: \#{usr1(a)}"
          a.close
          a, b = pair
          a.close
          puts "after closing a: \#{usr1(b)}"
          b.close
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["both: a,b", "after closing b: a", "after closing a: b"])
      end

      # today: remove_signal on the first loop restores SIG_DFL and USR1 kills the process
      it "keeps the other loop's handler when one of them calls remove_signal" do
        run = run_child(signal_prelude + <<~RUBY, backend)
          a, b = pair
          a.remove_signal(:USR1)
          puts "after a.remove_signal: \#{usr1(a, b)}"
          a.close
          b.close
          a, b = pair
          b.remove_signal(:USR1)
          puts "after b.remove_signal: \#{usr1(a, b)}"
          a.close
          b.close
        RUBY
        expect_no_crash(run)
        expect(lines(run)).to eq(["after a.remove_signal: b", "after b.remove_signal: a"])
      end
    end
  end
end
