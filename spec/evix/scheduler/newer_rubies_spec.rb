# frozen_string_literal: true

require "spec_helper"
require "tempfile"
require "timeout"

# What Ruby 3.3 and 3.4 do differently under Evix.run: the hooks only they
# call, and the ones evix leaves undefined on purpose (docs/architecture.md,
# "The scheduler's hooks, Ruby by Ruby"). Each runs on every lane; the defects they guard
# against were seen only on the Ruby named.
RSpec.describe "Evix::Scheduler on Ruby 3.3 and 3.4" do
  # Ruby passes io_select only the arguments IO.select was given: before the
  # hook's parameters were optional, IO.select([r]) and IO.select([r], [w])
  # raised ArgumentError on 3.3 and 3.4.
  # (Ruby 3.1 has no io_select hook: IO.select blocks the thread there.)
  # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- under test
  it "IO.select with one, two, three or four arguments works inside Evix.run", if: RUBY_VERSION >= "3.3" do
    result = evix_run_in_child do
      r, w = IO.pipe
      w.write("x")
      [capture { IO.select([r]) }, capture { IO.select([r], [w]) },
       capture { IO.select([r], nil, nil) }, capture { IO.select([r], nil, nil, 1) }]
        .map { |outcome| outcome[0] == :value ? outcome[1].map(&:size) : outcome }
    end
    expect(result).to eq([[1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 0, 0]])
  end
  # rubocop:enable Lint/IncompatibleIoSelectWithFiberScheduler

  it "IO.select([r]) waits in its fiber while another fiber writes", if: RUBY_VERSION >= "3.3" do
    result = evix_run_in_child do
      r, w = IO.pipe
      Fiber.schedule do
        sleep 0.02
        w.write("x")
      end
      IO.select([r]).map(&:size) # rubocop:disable Lint/IncompatibleIoSelectWithFiberScheduler -- under test
    end
    expect(result).to eq([1, 0, 0])
  end

  # Ruby 3.3 and 3.4 call io_pwrite from inside IO#pwrite's blocking region
  # (without the GVL): a hook that parks the fiber there hung IO#pwrite (6 of
  # 6 runs on 3.4.11). evix leaves it undefined; IO#pwrite writes directly.
  it "leaves io_pwrite undefined, so IO#pwrite inside Evix.run writes and returns" do
    expect(Evix::Scheduler.method_defined?(:io_pwrite)).to be(false)
    result = in_child do
      Tempfile.create("evix") do |file|
        Evix.run do
          written = 3.times.map { |i| file.pwrite("ab", i * 2) }
          [written, file.pread(6, 0)]
        end
      end
    end
    expect(result).to eq([[2, 2, 2], "ababab"])
  end

  # Ruby 3.4's blocking_operation_wait is left undefined (see
  # lib/evix/scheduler/scheduler.rb). With it, a fiber interrupted while its job sat
  # queued in the offload pool left the job to run later on the fiber's
  # dead stack frame (SIGSEGV on 3.4.11); a child forked inside Evix.run got
  # Evix::Error from every File.open, File.exist?, Dir.children and IO#close;
  # and each of those cost a trip through the pool.
  describe "blocking operations (blocking_operation_wait, Ruby >= 3.4)" do
    it "is not defined" do
      expect(Evix::Scheduler.method_defined?(:blocking_operation_wait)).to be(false)
    end

    it "survives fibers interrupted (Timeout, Fiber#raise) in file operations while the offload pool is busy" do
      run = run_ruby(<<~RUBY, timeout: 20, env: { "EVIX_OFFLOAD_THREADS" => "1" })
        require "timeout"
        require "tempfile"
        file = Tempfile.new("evix")
        file.write("x" * 65_536)
        file.flush
        outcomes = Hash.new(0)
        Evix.run do
          busy = Fiber.schedule { Evix.offload { sleep 0.3 } }
          40.times do
            Fiber.schedule do
              Timeout.timeout(0.001) { 200.times { File.read(file.path); File.exist?(file.path) } }
              outcomes[:done] += 1
            rescue Timeout::Error
              outcomes[:timeout] += 1
            end
          end
          victim = Fiber.schedule do
            200.times { File.stat(file.path) && sleep(0) }
            outcomes[:done] += 1
          rescue RuntimeError
            outcomes[:raised] += 1
          end
          victim.raise("stop") if victim.alive?
          busy
        end
        GC.start
        puts outcomes.values.sum
      RUBY
      expect(run.timed_out).to be(false)
      expect([run.status.signaled? ? "signal #{run.status.termsig}" : run.err, lines(run)]).to eq(["", ["41"]])
    end

    it "lets a child forked inside Evix.run open, stat, list and close files and pipes" do
      result = evix_run_in_child do
        dir = Dir.mktmpdir
        in_child do
          r, w = IO.pipe
          w.close
          capture do
            path = File.join(dir, "a")
            File.write(path, "hi")
            opened = File.open(path, &:read) # rubocop:disable Style/FileRead -- File.open is under test
            [File.exist?(path), opened, Dir.children(dir), r.close]
          end
        end
      ensure
        FileUtils.rm_rf(dir) if dir
      end
      expect(result).to eq([:value, [true, "hi", ["a"], nil]])
    end

    it "keeps File.exist? and IO#close about as cheap inside Evix.run as outside", timing: true do
      cost = lambda do
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        500.times do
          File.exist?(__FILE__)
          IO.pipe.each(&:close)
        end
        Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      end
      # The fastest of five interleaved samples each: one GC or preemption
      # can't decide it.
      outside, inside = in_child(timeout: 8) do
        cost.call # warm-up
        Array.new(5) { [cost.call, Evix.run { cost.call }] }.transpose.map(&:min)
      end
      # With every call offloaded, inside was 10-40x outside.
      expect(inside).to be < (outside * 3) + 0.02
    end
  end

  # Ruby 3.4's TCPSocket.new resolves in its own threads (Happy Eyeballs v2)
  # and never calls address_resolve: inside Evix.run it is made to connect
  # without it (spec/evix/scheduler/process_resolve_spec.rb checks the loop keeps running
  # while a name resolves); a caller's own fast_fallback: is kept.
  if Socket.respond_to?(:tcp_fast_fallback)
    it "keeps a fast_fallback: the caller passes to TCPSocket.new" do
      result = evix_run_in_child do
        server = TCPServer.new("127.0.0.1", 0)
        Fiber.schedule { server.accept.close }
        TCPSocket.new("localhost", server.addr[1], fast_fallback: true).close
        :connected
      end
      expect(result).to eq(:connected)
    end
  end
end
