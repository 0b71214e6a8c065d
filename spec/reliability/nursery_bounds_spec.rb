# frozen_string_literal: true

require "spec_helper"

# The nursery's cancellation bound, as large as any evix timeout, and what may end it early:
# no cancellation can spin, a second Ctrl-C or SIGTERM cuts it short, and an
# ensure that is already running keeps the time it has left.
RSpec.describe "Nursery cancellation bounds" do
  let(:prelude) do
    <<~RUBY
      $stdout.sync = true
      def puts(line) = $stdout.write("\#{line}\n") # one write: fibers may print in between
      def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      T0 = clock
      def elapsed = (clock - T0).round(2)
    RUBY
  end

  def run_child(code, timeout: 8)
    run_ruby(prelude + code, timeout: timeout)
  end

  [1e18, 2**63, 10**18].each do |bound|
    it "lets an ensure finish and raises the failure with cancel_timeout: #{bound}" do
      run = run_child(<<~RUBY)
        begin
          Evix.run(cancel_timeout: #{bound}) do
            Fiber.schedule { begin; sleep 10; ensure; sleep 0.1; puts "ensure done"; end }
            sleep 0.01
            raise "boom"
          end
        rescue => e
          puts "raised \#{e.message} after \#{elapsed}"
        end
      RUBY
      expect(run.timed_out).to be(false), run.err[0, 500]
      expect(lines(run)[0]).to eq("ensure done")
      expect(lines(run)[1]).to start_with("raised boom after")
      expect(Float(lines(run)[1].split.last)).to be < 3
    end
  end

  [1e300, 2**70, 10**30].each do |huge|
    it "rejects cancel_timeout: #{huge} at the call, as every evix timeout of 2**64 s or more" do
      message = "cancel_timeout is too large (got #{huge.inspect})"
      expect { Evix.run(cancel_timeout: huge) { :never } }.to raise_error(ArgumentError, message)
      expect(Fiber.scheduler).to be_nil
    end
  end

  [Float::INFINITY, -Float::INFINITY, Float::NAN, -1].each do |bad|
    it "rejects cancel_timeout: #{bad} at the call, naming it" do
      message = "cancel_timeout must be a finite, non-negative number of seconds (got #{bad.inspect})"
      expect { Evix.run(cancel_timeout: bad) { :never } }.to raise_error(ArgumentError, message)
      expect(Fiber.scheduler).to be_nil
    end
  end

  it "rejects a cancel_timeout that is not a number" do
    expect { Evix.run(cancel_timeout: "5") { :never } }.to raise_error(TypeError, /cancel_timeout.*"5"/)
  end

  it "does not spin on an error the loop raises on every turn: the run ends with it at once" do
    run = run_child(<<~RUBY)
      r, w = IO.pipe
      w.write("x")
      begin
        Evix.run(cancel_timeout: 30) do
          Fiber.schedule { begin; sleep 10; ensure; puts "ensure ran"; end }
          Fiber.scheduler.loop.add_io(r, Evix::READ) { raise "watcher" }
          sleep 10
        end
      rescue => e
        puts "raised \#{e.message} after \#{elapsed}"
      end
    RUBY
    expect(run.timed_out).to be(false), run.err[0, 500]
    out = lines(run)
    expect(out).to include("ensure ran")
    expect(out.last).to start_with("raised watcher after")
    expect(Float(out.last.split.last)).to be < 3
  end

  %w[INT TERM].each do |signal|
    it "cuts the cancellation short on a second SIG#{signal}" do
      run = run_child(<<~RUBY)
        Thread.new do
          sleep 0.3
          Process.kill(:#{signal}, $$)
          sleep 0.5
          Process.kill(:#{signal}, $$)
        end
        begin
          Evix.run(cancel_timeout: 30) do
            Fiber.schedule { begin; sleep 10; ensure; puts "cleaning"; sleep 20; end }
            sleep 10
          end
        rescue SignalException => e
          puts "raised \#{e.class} after \#{elapsed}"
        end
      RUBY
      expect(run.timed_out).to be(false), run.err[0, 500]
      expect(lines(run)).to include("cleaning")
      expect(lines(run).last).to match(/\Araised (Interrupt|SignalException) after/)
      expect(Float(lines(run).last.split.last)).to be < 4
      expect(run.err).to include("evix: abandoned")
    end
  end

  it "lets an ensure that a first cancellation started finish when the run is cancelled" do
    run = run_child(<<~RUBY)
      begin
        Evix.run(cancel_timeout: 5) do
          task = Fiber.scheduler.spawn do
            sleep 10
          ensure
            sleep 0.2
            puts "ensure done after \#{elapsed}"
          end
          sleep 0.01
          task.cancel("first")
          sleep 0.05 # the task is in its ensure now
          raise "boom"
        end
      rescue => e
        puts "raised \#{e.message}"
      end
    RUBY
    expect(run.timed_out).to be(false), run.err[0, 500]
    expect(lines(run).first).to start_with("ensure done after")
    expect(lines(run).last).to eq("raised boom")
    expect(run.err).not_to include("abandoned")
  end
end

RSpec.describe "Evix::Task#cancel twice" do
  it "does not cut the ensure the first cancellation started" do
    loop = Evix::Loop.new
    steps = []
    task = loop.spawn do
      loop.sleep(10)
    ensure
      steps << :ensure_started
      loop.sleep(0.05)
      steps << :ensure_done
    end
    loop.spawn do
      loop.sleep(0.01)
      task.cancel("first")
      loop.sleep(0.01)
      task.cancel("second")
    end
    loop.run
    expect(steps).to eq(%i[ensure_started ensure_done])
    expect { task.wait }.to raise_error(Evix::CancelledError, "first")
  ensure
    loop&.close
  end
end
