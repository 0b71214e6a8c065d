# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

RSpec.describe Evix::UNIXClient do
  include_context "with a loop"
  before { ev } # created first: its own descriptors are not counted as leaks
  let(:dir) { Dir.mktmpdir("evix-unix") }
  let(:path) { File.join(dir, "server.sock") }

  after { FileUtils.rm_rf(dir) }

  # A plain listener at +path+ with a backlog that is full: connects get EAGAIN.
  def full_listener
    listener = Socket.new(:UNIX, :STREAM)
    track_io(listener)
    listener.bind(Addrinfo.unix(path))
    listener.listen(0)
    3.times do
      filler = track_io(Socket.new(:UNIX, :STREAM)).first
      filler.connect_nonblock(Addrinfo.unix(path), exception: false)
    rescue Errno::EAGAIN
      nil
    end
    listener
  end

  it "connects and returns an Evix::IO for the connection" do
    listener = track_io(UNIXServer.new(path)).first
    helper_thread do
      conn = track_io(listener.accept).first
      conn.write(conn.gets)
    end
    line, io = in_task do
      client = described_class.connect(ev, path, timeout: 2)
      client.write("ping\n")
      [client.gets, client]
    end
    expect(io).to be_a(Evix::IO)
    expect(line).to eq("ping\n")
    expect(io.io.remote_address.unix_path).to eq(path)
    io.close
    expect(ev.stats).to include(watchers: 0, timers: 0)
  end

  it "raises Errno::ENOENT naming the path when there is no socket file, and leaks no descriptor" do
    before = fd_count
    expect { in_task { described_class.connect(ev, path, timeout: 2) } }
      .to raise_error(Errno::ENOENT, /#{Regexp.escape(path)}/)
    expect(fd_count).to eq(before)
  end

  it "raises Errno::ECONNREFUSED for a socket file nobody listens on" do
    stale = Socket.new(:UNIX, :STREAM)
    stale.bind(Addrinfo.unix(path))
    stale.close
    expect { in_task { described_class.connect(ev, path) } }
      .to raise_error(Errno::ECONNREFUSED, /#{Regexp.escape(path)}/)
  end

  it "waits while the server's backlog is full, letting other tasks run, and connects once there is room",
     timing: true do
    listener = full_listener
    ticks = 0
    ticker = ev.spawn do
      10.times do
        ev.sleep(0.01)
        ticks += 1
      end
    end
    ev.add_timer(0.15) { 4.times { listener.accept_nonblock(exception: false) } } # room again
    io = nil
    took = elapsed { io = in_task { described_class.connect(ev, path, timeout: 3) } }
    expect(io).to be_a(Evix::IO)
    expect(took).to be_between(0.1, 2)
    ticker.wait
    expect(ticks).to eq(10)
    io.close
  end

  it "raises Evix::TimeoutError when the backlog stays full for the timeout, and leaks no descriptor",
     timing: true do
    full_listener
    before = fd_count
    took = elapsed do
      expect { in_task { described_class.connect(ev, path, timeout: 0.3) } }
        .to raise_error(Evix::TimeoutError, /#{Regexp.escape(path)}.*0\.3/)
    end
    expect(took).to be_between(0.28, 1.5)
    expect(fd_count).to eq(before)
    expect(ev.stats).to include(timers: 0)
  end

  it "raises at the call for a path too long for sun_path, a bad timeout, or outside a task" do
    long = "/tmp/#{"x" * 120}"
    expect { in_task { described_class.connect(ev, long) } }.to raise_error(ArgumentError, /too long/)
    expect { in_task { described_class.connect(ev, path, timeout: -1) } }.to raise_error(ArgumentError, /timeout.*-1/)
    expect { in_task { described_class.connect(ev, path, timeout: "1") } }.to raise_error(TypeError, /timeout/)
    expect { described_class.connect(ev, path) }.to raise_error(Evix::Error, /task/)
  end

  it "leaves no descriptor behind when the task is cancelled while the backlog is full" do
    full_listener
    before = fd_count
    task = ev.spawn { described_class.connect(ev, path) }
    ev.add_timer(0.05) { task.cancel }
    expect { task.wait }.to raise_error(Evix::CancelledError)
    expect(fd_count).to eq(before)
  end
end
