# frozen_string_literal: true

require "spec_helper"

RSpec.describe Evix::TCPClient do
  include_context "with a loop"
  before { ev } # created first: its own descriptors are not counted as leaks

  # A plain listener on 127.0.0.1 (closed by the after hook).
  def plain_listener(backlog = 16)
    socket = Socket.new(:INET, :STREAM)
    track_io(socket)
    socket.bind(Addrinfo.tcp("127.0.0.1", 0))
    socket.listen(backlog)
    socket
  end

  # A port on 127.0.0.1 where nothing listens.
  def closed_port
    socket = Socket.new(:INET, :STREAM)
    socket.bind(Addrinfo.tcp("127.0.0.1", 0))
    port = socket.local_address.ip_port
    socket.close
    port
  end

  # Accepts one connection on +listener+ in a thread and echoes one line.
  def echo_one_line(listener)
    helper_thread do
      conn, = listener.accept
      track_io(conn)
      conn.write(conn.gets)
      conn.close
    end
  end

  it "connects without blocking and returns an Evix::IO for the connection" do
    listener = plain_listener
    echo_one_line(listener)
    line, io = in_task do
      client = described_class.connect(ev, "127.0.0.1", listener.local_address.ip_port, timeout: 2)
      client.write("ping\n")
      [client.gets, client]
    end
    expect(io).to be_a(Evix::IO)
    expect(line).to eq("ping\n")
    expect(io.io.remote_address.ip_port).to eq(listener.local_address.ip_port)
    io.close
    expect(ev.stats).to include(watchers: 0, timers: 0)
  end

  it "raises Errno::ECONNREFUSED naming host:port for a closed port, and leaks no descriptor" do
    port = closed_port
    before = fd_count
    expect { in_task { described_class.connect(ev, "127.0.0.1", port, timeout: 2) } }
      .to raise_error(Errno::ECONNREFUSED, /127\.0\.0\.1:#{port}/)
    expect(fd_count).to eq(before)
  end

  it "raises Evix::TimeoutError within the timeout when the peer never answers, and leaks no descriptor",
     timing: true do
    listener = plain_listener(0)
    address = listener.local_address
    # Fill the accept queue without accepting: Linux then drops new SYNs.
    4.times do
      filler = Socket.new(:INET, :STREAM)
      track_io(filler)
      filler.connect_nonblock(address, exception: false)
    end
    probe = Socket.new(:INET, :STREAM)
    track_io(probe)
    probe.connect_nonblock(address, exception: false)
    skip "this kernel completes connects to a listener with a full backlog" if probe.wait_writable(0.2)

    before = fd_count
    took = elapsed do
      expect { in_task { described_class.connect(ev, "127.0.0.1", address.ip_port, timeout: 0.3) } }
        .to raise_error(Evix::TimeoutError, /127\.0\.0\.1:#{address.ip_port}/)
    end
    expect(took).to be >= 0.28
    expect(took).to be < 1.0
    expect(fd_count).to eq(before)
    expect(ev.stats).to include(watchers: 0, timers: 0)
  end

  it "keeps other tasks running while it waits for the connection to time out" do
    listener = plain_listener(0)
    address = listener.local_address
    4.times { track_io(Socket.new(:INET, :STREAM)).first.connect_nonblock(address, exception: false) }
    ticks = 0
    ticker = ev.spawn do
      20.times do
        ev.sleep(0.01)
        ticks += 1
      end
    end
    connector = ev.spawn do
      described_class.connect(ev, "127.0.0.1", address.ip_port, timeout: 0.3)
    rescue Evix::TimeoutError, SystemCallError => e
      e
    end
    connector.wait
    ticker.wait
    expect(ticks).to eq(20)
  end

  it "resolves \"localhost\" and lets other tasks run meanwhile", timing: true do
    listener = plain_listener
    echo_one_line(listener)
    ticks = 0
    done = false
    ev.spawn do
      until done
        ticks += 1
        ev.sleep(0)
      end
    end
    result = ev.spawn do
      ticks_before = ticks
      client = described_class.connect(ev, "localhost", listener.local_address.ip_port, timeout: 2)
      ticks_during = ticks - ticks_before
      client.write("via localhost\n")
      [client.gets, ticks_during, client.io.remote_address.ipv4_loopback? || client.io.remote_address.ipv6_loopback?]
    ensure
      done = true
    end
    line, ticks_during, loopback = result.wait
    expect(line).to eq("via localhost\n")
    expect(ticks_during).to be >= 1
    expect(loopback).to be(true)
  end

  it "raises the resolver's error for a name that does not resolve" do
    expect { in_task { described_class.connect(ev, "nonexistent.invalid", 80, timeout: 2) } }
      .to raise_error(SocketError)
  end

  it "leaves the loop working when the task is cancelled while it resolves a name" do
    listener = plain_listener
    task = ev.spawn { described_class.connect(ev, "localhost", listener.local_address.ip_port) }
    ev.spawn { task.cancel }
    ev.add_timer(0.2) {} # time for the resolver thread to report back
    expect { ev.run }.not_to raise_error
    expect { task.wait }.to raise_error(Evix::CancelledError)
  end

  it "closes its connection attempt when the task is cancelled while the peer does not answer" do
    listener = plain_listener(0)
    address = listener.local_address
    4.times { track_io(Socket.new(:INET, :STREAM)).first.connect_nonblock(address, exception: false) }
    before = fd_count
    task = ev.spawn { described_class.connect(ev, "127.0.0.1", address.ip_port, timeout: 5) }
    ev.add_timer(0.05) { task.cancel }
    expect { task.wait }.to raise_error(Evix::CancelledError)
    expect(fd_count).to eq(before)
    expect(ev.stats).to include(watchers: 0)
  end

  it "raises Evix::Error outside a task" do
    expect { described_class.connect(ev, "127.0.0.1", closed_port) }.to raise_error(Evix::Error, /task/)
  end

  # The loop waits at most 2**64 seconds: a longer timeout is refused at the
  # call, before any connection is tried, as the loop's own waits refuse it.
  it "refuses a timeout, attempt_delay or handshake_timeout too large for the loop at the call, showing it" do
    listener = track_io(Socket.new(:INET, :STREAM)).first
    listener.bind(Addrinfo.tcp("127.0.0.1", 0))
    listener.listen(8)
    port = listener.local_address.ip_port
    [1e300, 2**70, 2**64].each do |huge|
      [{ timeout: huge }, { attempt_delay: huge }].each do |options|
        expect { in_task { described_class.connect(ev, "127.0.0.1", port, **options) } }
          .to raise_error(ArgumentError, /#{options.keys.first} is too large \(got #{Regexp.escape(huge.inspect)}\)/)
      end
    end
    expect(listener.accept_nonblock(exception: false)).to eq(:wait_readable) # nothing was tried
    client = in_task { described_class.connect(ev, "127.0.0.1", port, timeout: 2**63) } # large, but the loop's
    expect(client).to be_a(Evix::IO)
    client.close
  end

  it "refuses a too large timeout of Evix::IO and Evix::TCPServer at the call too" do
    r, = track_io(*IO.pipe)
    expect { ev.wrap(r, timeout: 1e300) }.to raise_error(ArgumentError, /timeout is too large \(got 1.0e\+300\)/)
    io = ev.wrap(r)
    expect { io.timeout = 2**64 }.to raise_error(ArgumentError, /timeout is too large/)
    expect { in_task { io.read(timeout: 1e300) } }.to raise_error(ArgumentError, /timeout is too large/)
    expect { Evix::TCPServer.new(ev, "127.0.0.1", 0, idle_timeout: 1e300) { nil } }
      .to raise_error(ArgumentError, /idle_timeout is too large \(got 1.0e\+300\)/)
  end
end
