# frozen_string_literal: true

require "spec_helper"
require "io/nonblock"
require "tempfile"
require "tmpdir"

# Evix::Scheduler: io_read and io_write (and io_pread, io_pwrite) on IOs that
# are not sockets (pipes, files), which the hooks read and write themselves
# with O_NONBLOCK set for the call. Writes: Ruby calls the hook to flush its
# own write buffer (a File is buffered), so the hook must write exactly the
# bytes it is handed; re-entering Ruby's IO methods from there (write_nonblock
# flushes that same buffer first) raised EAGAIN on 3.1 and ArgumentError on
# 3.3, with no byte written.
RSpec.describe Evix::Scheduler, "on files and pipes" do
  include EvixSchedulerHelpers

  chunk = ("x" * 1024).freeze

  describe "files" do
    it "lets fibers write a buffered File past its buffer, in order" do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "out")
        result = evix_run_in_child do
          File.open(path, "wb") do |file|
            writers = 2.times.map do |n|
              Fiber.schedule { 100.times { |i| file.write("#{n}:#{i.to_s.rjust(3, "0")}:#{chunk}\n") } }
            end
            writers.size
          end
        end
        expect(result).to eq(2)
        lines = File.readlines(path)
        expect(lines.size).to eq(200)
        expect(lines.uniq.size).to eq(200)
        %w[0 1].each do |n|
          mine = lines.select { |line| line.start_with?("#{n}:") }.map { |line| line.split(":")[1] }
          expect(mine).to eq(100.times.map { |i| i.to_s.rjust(3, "0") })
        end
      end
    end

    it "writes a File in one call larger than Ruby's buffer, and with puts and print" do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "out")
        big = "y" * (256 * 1024)
        evix_run_in_child do
          File.open(path, "w") do |file|
            file.write(big)
            file.puts("line")
            file.print("tail")
          end
          File.write(File.join(dir, "whole"), big)
        end
        expect(File.read(path)).to eq("#{big}line\ntail")
        expect(File.size(File.join(dir, "whole"))).to eq(big.bytesize)
      end
    end

    it "reads a File through the hook, all of it" do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "in")
        data = Random.new(1).bytes(300_000)
        File.binwrite(path, data)
        result = evix_run_in_child do
          File.open(path, "rb") { |file| [file.read(10), file.read(100_000).bytesize, file.read.bytesize] }
        end
        expect(result).to eq([data.byteslice(0, 10), 100_000, data.bytesize - 100_010])
      end
    end

    if RUBY_VERSION >= "3.3"
      describe "IO#pread and IO#pwrite (io_pread/io_pwrite hooks, Ruby >= 3.3)" do
        # Each runs in a forked child: a hook that wedges the process must fail
        # the example, not hang the suite.
        it "IO#pread on a Tempfile returns the right data through io_pread, and the loop keeps working" do
          result = in_child do
            scheduler = counting_scheduler_class.new
            Tempfile.create("evix") do |file|
              file.write("hello world")
              file.flush
              run_with(scheduler) do
                data = [file.pread(5, 6), file.pread(100, 0)]
                sleep 0.01
                data + [Evix.offload { :offloaded }, scheduler.calls[:io_pread]]
              end
            end
          end
          expect(result).to eq(["world", "hello world", :offloaded, 2])
        end

        # Ruby 3.3.8 calls io_pwrite from inside IO#pwrite's blocking call: a
        # hook that switches fibers or does blocking IO there wedges the thread
        # (seen with a minimal scheduler too), so a scheduler may rightly leave
        # io_pwrite undefined on such a Ruby; then IO#pwrite must still work.
        it "IO#pwrite on a Tempfile writes the right data (via io_pwrite where defined), and the loop keeps working" do
          hook_calls = described_class.method_defined?(:io_pwrite) ? 1 : 0
          result = in_child do
            scheduler = counting_scheduler_class.new
            Tempfile.create("evix") do |file|
              file.write("hello world")
              file.flush
              written = run_with(scheduler) do
                count = file.pwrite("HELLO", 0)
                sleep 0.01
                [count, Evix.offload { :offloaded }, scheduler.calls[:io_pwrite]]
              end
              written + [File.binread(file.path)]
            end
          end
          expect(result).to eq([5, :offloaded, hook_calls, "HELLO world"])
        end

        it "IO#pread and IO#pwrite work inside Evix.run" do
          result = in_child do
            Tempfile.create("evix") do |file|
              Evix.run do
                file.pwrite("abcdef", 0)
                sleep 0.01
                file.pread(3, 2)
              end
            end
          end
          expect(result).to eq("cde")
        end
      end
    end
  end

  # A pipe waits in the loop: once per backend.
  describe "pipes" do
    on_each_backend do
      it "waits for a slow reader of a pipe, writing every byte" do
        result = evix_run_in_child do
          r, w = IO.pipe
          w.nonblock = false
          w.sync = false # buffered, as a File is: the hook flushes Ruby's buffer
          got = []
          Fiber.schedule do
            total = 0
            while (data = r.read(4096))
              total += data.bytesize
              sleep 0.001 if total < 200_000 # slower than the writer
            end
            got << total
          end
          1000.times { w.write(chunk) }
          w.close
          sleep 0.01 while got.empty?
          got.first
        end
        expect(result).to eq(1000 * chunk.bytesize)
      end

      it "restores O_NONBLOCK of a blocking pipe after writing through it" do
        result = evix_run_in_child do
          r, w = IO.pipe
          w.nonblock = false
          Fiber.schedule { r.read(3) }
          w.write("abc")
          w.flush
          w.nonblock?
        end
        expect(result).to be(false)
      end

      it "gives IO#read_nonblock on an empty pipe :wait_readable or IO::EAGAINWaitReadable, not a wait" do
        result = evix_run_in_child do
          r, w = IO.pipe
          quiet = r.read_nonblock(10, exception: false)
          raised = capture { r.read_nonblock(10) }.first(2)
          w.write("ok")
          [quiet, raised, r.read_nonblock(10)]
        end
        expect(result).to eq([:wait_readable, [:raised, "IO::EAGAINWaitReadable"], "ok"])
      end

      it "reads the bytes Ruby's own read buffer holds (an ungetc) first in io_read, then the pipe" do
        result = evix_run_in_child do
          r, w = IO.pipe
          w.write("bcd")
          r.ungetc("a")
          buffer = IO::Buffer.new(3) # room for no more than "abc"
          count = Fiber.scheduler.io_read(r, buffer, 3)
          [buffer.get_string(0, count), r.read_nonblock(10)]
        end
        expect(result).to eq(%w[abc d])
      end

      it "gives a reader the byte another fiber pushed back (ungetc) while it waited, before the pipe's" do
        result = evix_run_in_child do
          r, w = IO.pipe
          Fiber.schedule do
            sleep 0.02
            r.ungetc("a")
            w.write("b")
          end
          [r.readpartial(10), r.readpartial(10)]
        end
        expect(result).to eq(%w[a b])
      end

      it "raises IOError from io_read on a pipe's write end, as Ruby's own reads do" do
        result = evix_run_in_child do
          _, w = IO.pipe
          capture { Fiber.scheduler.io_read(w, IO::Buffer.new(4), 1) }.first(3)
        end
        expect(result).to eq([:raised, "IOError", "not opened for reading"])
      end

      it "waits in its fiber to read a blocking pipe, and leaves it blocking" do
        result = evix_run_in_child do
          r, w = IO.pipe
          r.nonblock = false
          Fiber.schedule do
            sleep 0.02
            w.write("late")
            w.close
          end
          ticks = 0
          Fiber.schedule { ticks += 1 while sleep(0.001) && ticks < 5 }
          [r.read, ticks >= 5, r.nonblock?]
        end
        expect(result).to eq(["late", true, false])
      end
    end
  end
end
