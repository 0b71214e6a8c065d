# frozen_string_literal: true

require "spec_helper"

RSpec.describe "Evix::Loop file descriptors" do
  # Loops built here are not tracked by new_loop on purpose: they must be
  # released by close or by the GC alone.
  def build_loop(backend, reader)
    evloop = Evix::Loop.new(backend: backend)
    evloop.add_timer(10) {}
    evloop.add_io(reader, Evix::READ) {}
    evloop
  end

  def build_and_drop_loops(backend, reader, count)
    count.times { build_loop(backend, reader) }
    nil
  end

  Evix.backends.each do |backend|
    describe "backend #{backend}" do
      it "releases every fd of 1,000 closed loops" do
        r, = pipe
        before = fd_count
        1_000.times { build_loop(backend, r).close }
        expect(fd_count).to eq(before)
        expect(r.closed?).to be(false)
      end

      it "releases the fds of loops that are only garbage collected" do
        r, = pipe
        GC.start
        before = fd_count
        3.times do
          build_and_drop_loops(backend, r, 100)
          GC.start
        end
        GC.start
        GC.start
        # A conservative GC may keep a loop or two alive through a stale stack slot.
        expect(fd_count - before).to be <= 6
      end

      it "does not hold an fd per watcher or timer" do
        evloop = new_loop(backend)
        pipes = Array.new(50) { pipe }
        before = fd_count
        pipes.each { |(reader, _)| evloop.add_io(reader, Evix::READ) {} }
        50.times { evloop.add_timer(10) {} }
        evloop.run_once(0)
        expect(fd_count - before).to be <= 1
      end
    end
  end
end
