# frozen_string_literal: true

require "spec_helper"
require "tempfile"

# The hooks Ruby 4.0 and 4.1 call (fiber_interrupt, yield, io_close, and
# 4.1's single-transfer io_read/io_write/io_pread), called directly: no
# Ruby 4 runs here. Which ones Ruby uses is Evix::Scheduler::Interface's
# choice.
RSpec.describe Evix::Scheduler, "Ruby 4 hooks" do
  def scheduler_in_run(&)
    Evix.run { yield Fiber.scheduler }
  end

  describe "Interface" do
    it "chooses by the running Ruby's version" do
      version = Gem::Version.new(RUBY_VERSION)
      expect(described_class::Interface::RUBY).to eq(version.segments.first(2))
      expect(described_class::Interface::SELECT_AND_PREAD).to eq(version >= Gem::Version.new("3.3"))
      expect(described_class::Interface::SINGLE_TRANSFER).to eq(version >= Gem::Version.new("4.1"))
    end

    it "keeps the hooks of this Ruby's interface as io_read and io_write" do
      native = described_class.instance_method(:io_read)
      once = described_class.instance_method(:io_read_once)
      expect(native == once).to eq(described_class::Interface::SINGLE_TRANSFER)
    end
  end

  describe "#fiber_interrupt" do
    it "raises the exception in a fiber waiting on an IO, from another thread" do
      r, w = pipe
      outcome = scheduler_in_run do |scheduler|
        reader = scheduler.spawn do
          r.wait_readable
          :not_interrupted
        rescue IOError => e
          e.message
        end
        sleep 0.01 # the reader waits
        Thread.new { scheduler.fiber_interrupt(reader.fiber, IOError.new("closed by another thread")) }.join
        reader.wait
      end
      expect(outcome).to eq("closed by another thread")
      w.write("x") # nothing is left waiting on the pipe
    end

    it "does nothing to a fiber that has finished" do
      outcome = scheduler_in_run do |scheduler|
        done = Fiber.schedule { :done }
        scheduler.fiber_interrupt(done, IOError.new("too late"))
        sleep 0.01
        :fine
      end
      expect(outcome).to eq(:fine)
    end

    it "sends #raise to an object that stands for the fiber" do
      raised = []
      proxy = Object.new
      proxy.define_singleton_method(:raise) { |exception| raised << exception.message }
      scheduler_in_run do |scheduler|
        scheduler.fiber_interrupt(proxy, IOError.new("via proxy"))
        sleep 0.01
      end
      expect(raised).to eq(["via proxy"])
    end

    it "is quiet once the loop is closed" do
      scheduler = described_class.new
      scheduler.close
      expect(scheduler.fiber_interrupt(Fiber.current, IOError.new("x"))).to be_nil
    end
  end

  describe "#yield" do
    it "lets other ready fibers run, then goes on" do
      order = scheduler_in_run do |scheduler|
        log = []
        scheduler.spawn { log << :other } # starts on the loop's next turn
        log << :before
        expect(scheduler.yield).to be_nil
        log << :after
        log
      end
      expect(order).to eq(%i[before other after])
    end
  end

  describe "#io_close" do
    it "ends the waits on the fd with IOError and leaves the closing to Ruby" do
      r, w = pipe
      outcome = scheduler_in_run do |scheduler|
        reader = scheduler.spawn do
          r.wait_readable
          :not_ended
        rescue IOError => e
          e.class
        end
        sleep 0.01 # the reader waits
        expect(scheduler.io_close(r.fileno)).to be_nil
        [reader.wait, r.closed?]
      end
      expect(outcome).to eq([IOError, false])
      w.close
    end

    it "is quiet for an fd the loop never saw" do
      r, = pipe
      expect(scheduler_in_run { |scheduler| scheduler.io_close(r.fileno) }).to be_nil
    end
  end

  describe "single-transfer io_read_once / io_write_once (Ruby 4.1's io_read, io_write)" do
    it "reads at most length bytes at offset once, returning a short count" do
      r, w = pipe
      w.write("hello")
      buffer = IO::Buffer.new(16)
      count = scheduler_in_run { |scheduler| scheduler.io_read_once(r, buffer, 4, 10) }
      expect(count).to eq(5)
      expect(buffer.get_string(4, 5)).to eq("hello")
    end

    it "returns -EAGAIN instead of waiting when nothing is there, and 0 at end of stream" do
      r, w = pipe
      buffer = IO::Buffer.new(8)
      outcome = scheduler_in_run do |scheduler|
        empty = scheduler.io_read_once(r, buffer, 0, 8)
        w.close
        [empty, scheduler.io_read_once(r, buffer, 0, 8)]
      end
      expect(outcome).to eq([-Errno::EAGAIN::Errno, 0])
    end

    it "reads no more than length even when more is there, on a socket too" do
      a, b = socket_pair
      b.write("abcdef")
      buffer = IO::Buffer.new(8)
      count = scheduler_in_run { |scheduler| scheduler.io_read_once(a, buffer, 0, 3) }
      expect([count, buffer.get_string(0, 3), a.read_nonblock(10)]).to eq([3, "abc", "def"])
    end

    it "returns 0 for a length of 0 without reading" do
      r, w = pipe
      w.write("x")
      buffer = IO::Buffer.new(4)
      expect(scheduler_in_run { |scheduler| scheduler.io_read_once(r, buffer, 0, 0) }).to eq(0)
      expect(r.read_nonblock(1)).to eq("x")
    end

    it "reads bytes Ruby's own buffer holds (an ungetc) first" do
      r, w = pipe
      w.write("bc")
      r.ungetc("a")
      buffer = IO::Buffer.new(8)
      count = scheduler_in_run { |scheduler| scheduler.io_read_once(r, buffer, 0, 8) }
      expect(buffer.get_string(0, count)).to start_with("a")
    end

    it "writes at most length bytes once; -EAGAIN when the pipe is full" do
      r, w = pipe
      buffer = IO::Buffer.for("0123456789")
      outcome = scheduler_in_run do |scheduler|
        first = scheduler.io_write_once(w, buffer, 2, 3)
        filler = "x" * 65_536
        nil until w.write_nonblock(filler, exception: false) == :wait_writable
        [first, scheduler.io_write_once(w, buffer, 0, 10)]
      end
      expect(outcome).to eq([3, -Errno::EAGAIN::Errno])
      expect(r.read_nonblock(3)).to eq("234")
    end

    it "raises ArgumentError when offset + length exceeds the buffer, TypeError for other bad arguments" do
      r, = pipe
      buffer = IO::Buffer.new(4)
      scheduler_in_run do |scheduler|
        expect { scheduler.io_read_once(r, buffer, 2, 3) }.to raise_error(ArgumentError, /offset \+ length/)
        expect { scheduler.io_write_once(r, buffer, 2, 3) }.to raise_error(ArgumentError, /offset \+ length/)
        expect { scheduler.io_read_once(r, buffer, -1, 3) }.to raise_error(TypeError, /io_read/)
        expect { scheduler.io_read_once(:nope, buffer, 0, 1) }.to raise_error(TypeError, /io_read/)
      end
    end

    it "reads a file at an offset once with io_pread_once" do
      file = Tempfile.create("evix-pread")
      file.write("0123456789")
      file.flush
      buffer = IO::Buffer.new(8)
      outcome = scheduler_in_run do |scheduler|
        [scheduler.io_pread_once(file, buffer, 3, 1, 4), scheduler.io_pread_once(file, buffer, 10, 0, 4)]
      end
      expect(outcome).to eq([4, 0])
      expect(buffer.get_string(1, 4)).to eq("3456")
    ensure
      file&.close
      File.unlink(file.path) if file
    end
  end
end
