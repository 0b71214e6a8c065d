# frozen_string_literal: true

require "spec_helper"

# How failures end a run (docs/architecture.md, "Failure and cancellation"):
# Evix.run is a nursery.
# The first unhandled exception, Interrupt, SignalException, exit or
# Thread#kill cancels the run's other fibers, runs their ensure blocks (bounded
# by cancel_timeout), then propagates. A regression here would hang or kill the
# process, so each case runs in a fresh Ruby with a deadline and checks what it printed.
RSpec.describe "How failures end a run" do
  # Prepended to every child's code: unbuffered output, an error class of our
  # own, and a monotonic clock. `puts` is one write: Ruby's own writes the line
  # and its newline in two, and another fiber may print between them.
  let(:prelude) do
    <<~RUBY
      $stdout.sync = true
      def puts(line) = $stdout.write("\#{line}\n")
      Boom = Class.new(StandardError)
      def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    RUBY
  end

  def run_child(code, backend, timeout: 5)
    run_ruby(prelude + code, timeout: timeout, env: { "EVIX_BACKEND" => backend.to_s })
  end

  # today: ArgumentError (Evix.run takes no keywords)
  it "accepts cancel_timeout: and returns the block's value" do
    expect(Evix.run(cancel_timeout: 5) { 6 * 7 }).to eq(42)
    expect(Fiber.scheduler).to be_nil
  end

  Evix.backends.each do |backend|
    describe "Evix.run on backend #{backend}" do
      # today: hangs (the run waits forever for the parked fiber; child killed)
      it "cancels a fiber parked in a pipe read when the block raises, runs its ensure, then raises" do
        run = run_child(<<~RUBY, backend)
          r, _w = IO.pipe
          begin
            Evix.run do
              Fiber.schedule do
                r.read(1)
              rescue Exception => e
                puts "fiber got \#{e.class}"
                raise
              ensure
                puts "fiber ensure"
              end
              sleep 0.05
              raise Boom, "from the block"
            end
          rescue Boom => e
            puts "raised \#{e.message}"
          end
          puts "scheduler \#{Fiber.scheduler.inspect}"
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run)).to eq(["fiber got Evix::CancelledError", "fiber ensure", "raised from the block",
                                  "scheduler nil"])
      end

      # today: the other fiber's ensure is skipped (the run is abandoned)
      it "cancels the other fibers when a scheduled fiber raises, runs their ensure, then raises that exception" do
        run = run_child(<<~RUBY, backend)
          r, _w = IO.pipe
          begin
            Evix.run do
              Fiber.schedule do
                r.read(1)
              ensure
                puts "reader ensure"
              end
              Fiber.schedule do
                sleep
              ensure
                puts "sleeper ensure"
              end
              Fiber.schedule do
                sleep 0.05
                raise Boom, "from a fiber"
              end
              :block_done
            end
          rescue Boom => e
            puts "raised \#{e.message}"
          end
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run)).to contain_exactly("reader ensure", "sleeper ensure", "raised from a fiber")
        expect(lines(run).last).to eq("raised from a fiber")
      end

      # today: hangs (the block's error waits for the sleeping fiber forever)
      it "raises the first exception with the later ones (raised during cancellation) in #suppressed" do
        run = run_child(<<~RUBY, backend)
          begin
            Evix.run do
              Fiber.schedule do
                sleep
              ensure
                raise Boom, "second"
              end
              Fiber.schedule do
                sleep
              ensure
                raise Boom, "third"
              end
              sleep 0.05
              raise Boom, "first"
            end
          rescue Boom => e
            puts "raised \#{e.message}"
            puts "suppressed \#{e.suppressed.map(&:message).sort.inspect}"
          end
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run)).to eq(["raised first", 'suppressed ["second", "third"]'])
      end

      # today: ArgumentError for cancel_timeout: (and without it, hangs)
      it "abandons a fiber that keeps blocking after cancellation after cancel_timeout, with a warning naming it",
         timing: true do
        run = run_child(<<~RUBY, backend)
          t0 = nil
          begin
            Evix.run(cancel_timeout: 0.3) do
              Fiber.schedule do
                puts "fiber \#{Fiber.current.inspect[/0x\\h+/]}"
                puts "task \#{Evix::Task.current.inspect[/0x\\h+/]}"
                sleep
              ensure
                sleep 30
              end
              sleep 0.05
              t0 = clock
              raise Boom, "first"
            end
          rescue Boom => e
            puts "raised \#{e.message} after \#{(clock - t0).round(2)}"
          end
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        raised = lines(run).grep(/\Araised/).first
        expect(raised).to match(/\Araised first after /)
        expect(Float(raised.split.last)).to be_between(0.25, 2.0)
        names = lines(run).grep(/\A(fiber|task) 0x/).map { |line| line.split.last }
        expect(names).not_to be_empty
        named = names.any? { |name| run.err.include?(name) }
        expect(named).to be(true), "no warning naming the fiber: #{run.err.inspect}"
      end

      # today: hangs (waits forever for the accept loop, printing nothing)
      it "raises an error of the block promptly while an accept-loop fiber runs, after that fiber's ensure",
         timing: true do
        run = run_child(<<~RUBY, backend)
          server = TCPServer.new("127.0.0.1", 0)
          t0 = nil
          begin
            Evix.run do
              Fiber.schedule do
                loop { server.accept.close }
              ensure
                server.close
                puts "accept ensure"
              end
              sleep 0.05
              t0 = clock
              raise Boom, "in the block"
            end
          rescue Boom => e
            puts "raised \#{e.message} after \#{(clock - t0).round(2)}"
          end
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run).first).to eq("accept ensure")
        expect(lines(run).last).to match(/\Araised in the block after /)
        expect(Float(lines(run).last.split.last)).to be < 1.5
      end

      # today: the fibers' ensure blocks are skipped (Interrupt abandons the run)
      it "on SIGINT cancels the fibers, runs their ensure, then raises Interrupt" do
        run = run_child(<<~RUBY, backend)
          server = TCPServer.new("127.0.0.1", 0)
          begin
            Evix.run do
              Fiber.schedule do
                loop { server.accept.close }
              ensure
                puts "accept ensure"
              end
              Fiber.schedule do
                sleep
              ensure
                puts "sleeper ensure"
              end
              Thread.new { sleep 0.2; Process.kill(:INT, Process.pid) }
              :block_done
            end
          rescue Interrupt => e
            puts "raised \#{e.class}"
          end
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run)).to contain_exactly("accept ensure", "sleeper ensure", "raised Interrupt")
        expect(lines(run).last).to eq("raised Interrupt")
      end

      # today: the fiber's ensure is skipped (the Interrupt abandons the run)
      it "on Thread#raise(Interrupt) into the run's thread cancels the fibers, runs their ensure, then raises it" do
        run = run_child(<<~RUBY, backend)
          r, _w = IO.pipe
          main = Thread.current
          Thread.new { sleep 0.2; main.raise(Interrupt) }
          begin
            Evix.run do
              Fiber.schedule do
                r.read(1)
              ensure
                puts "reader ensure"
              end
              sleep
            end
          rescue Interrupt => e
            puts "raised \#{e.class}"
          end
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run)).to eq(["reader ensure", "raised Interrupt"])
      end

      # today: the fiber's ensure is skipped; the process dies of SIGTERM without it
      it "on SIGTERM without a handler runs the fibers' ensure, then the process dies of SIGTERM" do
        run = run_child(<<~RUBY, backend)
          server = TCPServer.new("127.0.0.1", 0)
          Evix.run do
            Fiber.schedule do
              loop { server.accept.close }
            ensure
              puts "accept ensure"
            end
            Thread.new { sleep 0.2; Process.kill(:TERM, Process.pid) }
            :block_done
          end
          puts "not reached"
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(run.status.termsig).to eq(Signal.list["TERM"])
        expect(lines(run)).to eq(["accept ensure"])
      end

      # today: the accept fiber's ensure is skipped (exit abandons the run)
      it "on exit from a fiber runs the other fibers' ensure, then exits with that status" do
        run = run_child(<<~RUBY, backend)
          server = TCPServer.new("127.0.0.1", 0)
          Evix.run do
            Fiber.schedule do
              loop { server.accept.close }
            ensure
              puts "accept ensure"
            end
            Fiber.schedule do
              sleep 0.05
              exit 3
            end
            :block_done
          end
          puts "not reached"
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(run.status.exitstatus).to eq(3)
        expect(lines(run)).to eq(["accept ensure"])
      end

      # today: the killed thread hangs in Scheduler#close waiting for the accept loop (join returns nil)
      it "on Thread#kill of the run's thread runs the fibers' ensure and the thread ends" do
        run = run_child(<<~RUBY, backend)
          server = TCPServer.new("127.0.0.1", 0)
          thread = Thread.new do
            Evix.run do
              Fiber.schedule do
                loop { server.accept.close }
              ensure
                puts "accept ensure"
              end
              :block_done
            end
          end
          sleep 0.2
          thread.kill
          puts(thread.join(2) ? "thread ended" : "thread still running")
          $stdout.flush
          exit!(0)
        RUBY
        expect(run.timed_out).to be(false), "hung: #{run.err}"
        expect(lines(run)).to eq(["accept ensure", "thread ended"])
      end

      # today: the process never exits (child killed at the deadline)
      it "lets the process exit when the main thread ends while a background thread serves inside Evix.run" do
        run = run_child(<<~RUBY, backend)
          server = TCPServer.new("127.0.0.1", 0)
          Thread.new do
            Evix.run do
              Fiber.schedule do
                loop { server.accept.close }
              ensure
                puts "accept ensure"
              end
            end
          end
          sleep 0.2
          puts "main done"
        RUBY
        expect(run.timed_out).to be(false), "did not exit: #{run.err}"
        expect(run).to be_success
        expect(lines(run)).to eq(["main done", "accept ensure"])
      end
    end

    describe "Evix::Loop#run on backend #{backend}" do
      # the loop's own rule (docs/architecture.md, "Failure and cancellation")
      it "propagates a callback's exception out of run, and the loop runs again" do
        evloop = new_loop(backend)
        evloop.next_tick { raise EvixSpecError, "from a callback" }
        expect { evloop.run }.to raise_error(EvixSpecError, "from a callback")
        ran = false
        evloop.add_timer(0.01) { ran = true }
        evloop.run
        expect(ran).to be(true)
      end

      # passes today
      it "propagates an unwaited task's exception out of run, and the loop runs again" do
        evloop = new_loop(backend)
        evloop.spawn do
          evloop.sleep(0.01)
          raise EvixSpecError, "from a task"
        end
        expect { evloop.run }.to raise_error(EvixSpecError, "from a task")
        value = nil
        task = evloop.spawn do
          evloop.sleep(0.01)
          :again
        end
        evloop.spawn { value = task.wait }
        evloop.run
        expect(value).to eq(:again)
      end
    end

    describe "Evix::TCPServer on backend #{backend}" do
      # passes today
      it "hands a handler's exception to on_error and closes only that connection" do
        evloop = new_loop(backend)
        server = Evix::TCPServer.new(evloop, "127.0.0.1", 0) do |client|
          while (line = client.gets)
            raise EvixSpecError, "bad line" if line == "bad\n"

            client.write(line)
          end
        end
        errors = []
        server.on_error { |error, _client| errors << error.message }
        seen = {}
        evloop.spawn do
          good = Evix::TCPClient.connect(evloop, "127.0.0.1", server.port, timeout: 2)
          bad = Evix::TCPClient.connect(evloop, "127.0.0.1", server.port, timeout: 2)
          good.write("one\n")
          seen[:good1] = good.gets
          bad.write("bad\n")
          seen[:bad] = bad.read
          good.write("two\n")
          seen[:good2] = good.gets
          good.close
          bad.close
          server.close
        end
        evloop.run
        expect(errors).to eq(["bad line"])
        expect(seen).to eq(good1: "one\n", bad: nil, good2: "two\n")
      end
    end
  end
end
