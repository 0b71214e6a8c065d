# frozen_string_literal: true

require "spec_helper"

# Evix::Scheduler: Process.wait and name resolution, the hooks that block a
# thread of the offload pool instead of the loop (process_wait, address_resolve).
RSpec.describe Evix::Scheduler, "process_wait and address_resolve" do
  include EvixSchedulerHelpers

  describe "Process.wait2" do
    it "waits for a spawned child while other fibers run, with the right exit status", timing: true do
      state = {}
      pid = nil
      waited = Evix.run do
        start_ticker(state)
        pid = Process.spawn("sh", "-c", "sleep 0.2; exit 3")
        Process.wait2(pid)
      ensure
        state[:done] = true
      end
      expect(waited[0]).to eq(pid)
      expect(waited[1]).to be_a(Process::Status)
      expect(waited[1].exitstatus).to eq(3)
      expect(state[:ticks]).to be >= 5
    ensure
      wait_child(pid, timeout: 1) if pid && waited.nil?
    end

    it "reports a child killed by a signal from another fiber" do
      pid = Process.spawn("sleep", "5")
      status = Evix.run do
        Fiber.schedule do
          sleep 0.05
          Process.kill(:TERM, pid)
        end
        Process.wait2(pid)[1]
      end
      expect(status).to be_signaled
      expect(status.termsig).to eq(Signal.list["TERM"])
    ensure
      wait_child(pid, timeout: 1) if pid && status.nil?
    end

    # In a child process: a lost offload result leaves Evix.run waiting
    # forever, and nothing can interrupt it (see run_spec).
    it "waits for several children from several fibers at once, each getting its own status", timing: true do
      result = in_child do
        Evix.run { Evix.offload { :warm } } # one idle pool thread, as after any earlier offload
        pids = [0.1, 0.15, 0.05].each_with_index.map do |delay, i|
          Process.spawn("sh", "-c", "sleep #{delay}; exit #{i + 1}")
        end
        statuses = {}
        took = elapsed do
          Evix.run { pids.each { |pid| Fiber.schedule { statuses[pid] = Process.wait2(pid)[1].exitstatus } } }
        end
        [pids.map { |pid| statuses[pid] }, took]
      end
      expect(result[0]).to eq([1, 2, 3])
      expect(result[1]).to be < 0.5
    end
  end

  describe "name resolution" do
    # Resolution of "localhost" is instant, so the resolver's own lookup
    # (made on the offload pool, where no scheduler is set) is slowed down to
    # stand for a slow DNS server.
    def slow_resolver(delay)
      allow(Addrinfo).to receive(:getaddrinfo).and_wrap_original do |original, *args|
        sleep delay if Fiber.scheduler.nil? && !Thread.current.equal?(Thread.main)
        original.call(*args)
      end
    end

    it "resolves Addrinfo.getaddrinfo(\"localhost\", 80) without blocking other fibers", timing: true do
      slow_resolver(0.15)
      state = {}
      infos = Evix.run do
        start_ticker(state)
        Addrinfo.getaddrinfo("localhost", 80)
      ensure
        state[:done] = true
      end
      expect(infos).not_to be_empty
      expect(infos.map(&:ip_address)).to include("127.0.0.1")
      expect(infos.map(&:ip_port).uniq).to eq([80])
      expect(state[:ticks]).to be >= 5
    end

    it "connects TCPSocket.new(\"localhost\", port) without blocking other fibers", timing: true do
      slow_resolver(0.15)
      server = TCPServer.new("127.0.0.1", 0)
      track_io(server)
      state = {}
      reply = Evix.run do
        start_ticker(state)
        Fiber.schedule do
          conn = server.accept
          conn.puts("hi #{conn.gets}")
          conn.close
        end
        sock = TCPSocket.new("localhost", server.addr[1])
        sock.puts("there")
        line = sock.gets
        sock.close
        line
      ensure
        state[:done] = true
      end
      expect(reply).to eq("hi there\n")
      expect(state[:ticks]).to be >= 5
    end

    it "goes through the address_resolve hook" do
      scheduler = counting_scheduler_class.new
      infos = run_with(scheduler) { Addrinfo.getaddrinfo("localhost", 80) }
      expect(infos.map(&:ip_address)).to include("127.0.0.1")
      expect(scheduler.calls[:address_resolve]).to be >= 1
    end

    it "address_resolve returns the addresses of a name, brackets and zone ids stripped" do
      result = Evix.run do
        [Fiber.scheduler.address_resolve("localhost"), Fiber.scheduler.address_resolve("[::1]"),
         Fiber.scheduler.address_resolve("::1%lo")]
      end
      expect(result[0]).to include("127.0.0.1")
      expect(result[1]).to eq(["::1"])
      expect(result[2]).to eq(["::1"])
    end
  end
end
