# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

# Evix::IO's output side: puts/print/<<, try_write and its queue bounded by
# the write high-water mark, flush, and the addresses of a connection.
EachBackend.describe Evix::IO, "output" do
  include_context "an Evix::IO on a socket pair"

  # Everything +socket+ can read now, without waiting.
  def read_available(socket)
    out = String.new(encoding: Encoding::BINARY)
    while (chunk = socket.read_nonblock(65_536, exception: false)).is_a?(String)
      out << chunk
    end
    out
  end

  describe "#puts, #print and #<<" do
    # What stdlib IO writes for the same call, read back from a pipe.
    def stdlib_output(method, args)
      r, w = pipe
      w.binmode
      w.public_send(method, *args)
      w.close
      r.binmode.read
    end

    recursive = [1].tap { |array| array << array }
    no_string = Object.new.tap { |object| def object.to_s = nil }
    [
      [], ["line"], ["line\n"], [nil], [[]], [[[], []]], [1, :two, 3.0], [["a", %W[b\n c]], "d"],
      ["caf\u00e9", "\xff\xfe".b], [recursive], [no_string], [""]
    ].each do |args|
      it "puts(#{args.map(&:inspect).join(", ")}) writes what IO#puts writes" do
        want = stdlib_output(:puts, args)
        want = want.sub(/0x\h+/, "") if args == [no_string]
        expect(in_task { io.puts(*args) }).to be_nil
        got = read_available(peer)
        got = got.sub(/0x\h+/, "") if args == [no_string]
        expect(got).to eq(want)
      end
    end

    it "print writes each object's to_s with nothing between or after, and returns nil" do
      expect(in_task { io.print("a", 1, nil, :b, "\u00e9", "\xff".b) }).to be_nil
      expect(in_task { io.print }).to be_nil
      expect(read_available(peer)).to eq("a1b\u00e9\xff".b)
    end

    it "<< writes the object's to_s and returns the IO, so calls chain" do
      expect(in_task { io << "GET " << :/ << " HTTP/1.0\r\n" << 42 }).to equal(io)
      expect(read_available(peer)).to eq("GET / HTTP/1.0\r\n42")
    end

    it "waits like #write when the kernel buffer is full" do
      filled = fill_up(pair[0])
      done = ev.spawn { io.puts("after the backlog") }
      ev.spawn do
        ev.sleep(0.01)
        ev.wrap(peer).read_exactly(filled)
      end
      ev.run
      expect(done.wait).to be_nil
      expect(read_available(peer)).to eq("after the backlog\n")
    end
  end

  describe "#try_write" do
    it "returns the byte size when the kernel takes everything at once, queueing nothing" do
      expect(io.try_write("h\u00e9llo")).to eq(6)
      expect(io.queued_bytes).to eq(0)
      expect(read_available(peer)).to eq("h\u00e9llo".b)
    end

    it "queues what the kernel does not take now and sends it in order from the loop, without a task" do
      filled = fill_up(pair[0])
      expect(io.try_write("first ")).to eq(6)
      expect(io.try_write(:second)).to eq(6)
      expect(io.queued_bytes).to eq(12)
      received = String.new(encoding: Encoding::BINARY)
      reader = ev.add_io(peer, Evix::READ) do
        received << read_available(peer)
        ev.stop if received.bytesize >= filled + 12
      end
      ev.run # the queue's watcher keeps the loop running until it is written
      reader.cancel
      expect(received.byteslice(filled, 12)).to eq("first second")
      expect(io.queued_bytes).to eq(0)
      ev.run_once(0)
      expect(ev.stats[:watchers]).to eq(0) # nothing is left watching an empty queue
    end

    it "refuses a message, whole, when the queue would pass the high-water mark, and takes it again once drained" do
      io.write_high_water = 100
      fill_up(pair[0])
      expect(Array.new(5) { |i| io.try_write("msg#{i}:#{"." * 25}") }).to eq([30, 30, 30, false, false])
      expect(io.queued_bytes).to eq(90)
      expect(io.try_write("x" * 10)).to eq(10) # exactly at the mark is still under it
      expect(io.try_write("y")).to be(false)
      # The peer reads everything; the loop writes the queue meanwhile.
      drain_peer = ev.add_io(peer, Evix::READ) { read_available(peer) }
      ev.run_once(0.01) until io.queued_bytes.zero?
      drain_peer.cancel
      expect(io.try_write("msg5")).to eq(4)
      expect(read_available(peer)).to end_with("msg2:#{"." * 25}xxxxxxxxxxmsg5")
    end

    it "bounds the queue for a reader that never reads while megabytes are offered (a chat member gone quiet)" do
      io.write_high_water = 64 * 1024
      line = "#{"m" * 99}\n"
      accepted = refused = 0
      50_000.times do
        io.try_write(line) ? accepted += 1 : refused += 1
        expect(io.queued_bytes).to be <= 64 * 1024
      end
      expect(refused).to be > 40_000
      # What the peer reads is whole lines, the accepted ones, in order.
      received = String.new(encoding: Encoding::BINARY)
      reader = ev.add_io(peer, Evix::READ) { received << read_available(peer) }
      deadline = now + 5
      ev.run_once(0.01) until received.bytesize >= accepted * line.bytesize || now > deadline
      reader.cancel
      expect(received.bytesize).to eq(accepted * line.bytesize)
      expect(received.each_line.uniq).to eq([line])
    end

    it "takes a message larger than the mark when nothing is queued (it is never stuck)" do
      io.write_high_water = 10
      fill_up(pair[0])
      expect(io.try_write("z" * 50)).to eq(50)
      expect(io.queued_bytes).to eq(50)
      expect(io.try_write("z")).to be(false)
    end

    it "raises the write's error at the call when the peer is gone (Errno::EPIPE), and Evix::ClosedError once closed" do
      peer.close
      expect { io.try_write("x" * 1_000_000) }.to raise_error(Errno::EPIPE)
      io.close
      expect { io.try_write("x") }.to raise_error(Evix::ClosedError)
    end

    it "reports an error of the background write from the next try_write and from flush" do
      fill_up(pair[0])
      expect(io.try_write("queued")).to eq(6)
      peer.close
      ev.run # the queue's watcher sees the error and stops
      broken = [Errno::ECONNRESET, Errno::EPIPE]
      expect { io.try_write("more") }.to(raise_error { |e| expect(broken).to include(e.class) })
      expect { in_task { io.flush } }.to(raise_error { |e| expect(broken).to include(e.class) })
      expect(ev.stats[:watchers]).to eq(0)
    end

    it "checks its argument and the thread at the call" do
      io
      expect do
        Thread.new do
          Thread.current.report_on_exception = false
          io.try_write("x")
        end.value
      end.to raise_error(Evix::Error, /thread/)
      expect(io.try_write(12)).to eq(2) # any object, by its to_s, like #write
      expect(read_available(peer)).to eq("12")
    end

    it "drops the queue on #close: its watcher goes, the loop ends" do
      fill_up(pair[0])
      io.try_write("never sent")
      io.close
      expect(io.queued_bytes).to eq(0)
      ev.run
      expect(ev.stats[:watchers]).to eq(0)
    end
  end

  describe "after IO#close on the wrapped IO itself" do
    it "forgets the queue: queued_bytes is 0, try_write and flush raise Evix::ClosedError, the loop ends" do
      fill_up(pair[0])
      io.try_write("queued")
      pair[0].close
      ev.run
      expect(io.queued_bytes).to eq(0)
      expect { io.try_write("x") }.to raise_error(Evix::ClosedError)
      expect { io.flush }.to raise_error(Evix::ClosedError)
    end
  end

  describe "#flush" do
    it "returns at once with nothing queued, even outside a task" do
      expect(io.flush).to equal(io)
    end

    it "waits until every queued byte is with the kernel" do
      filled = fill_up(pair[0])
      io.try_write("tail")
      drained = ev.spawn do
        io.flush
        io.queued_bytes
      end
      ev.spawn do
        ev.sleep(0.01)
        ev.wrap(peer).read_exactly(filled)
      end
      ev.run
      expect(drained.wait).to eq(0)
      expect(read_available(peer)).to eq("tail")
    end

    it "raises Evix::TimeoutError when the kernel takes nothing for timeout seconds; the bytes stay queued" do
      fill_up(pair[0])
      io.try_write("stuck")
      expect { in_task { io.flush(timeout: 0.02) } }.to raise_error(Evix::TimeoutError)
      expect(io.queued_bytes).to eq(5)
      expect { io.flush(timeout: -1) }.to raise_error(ArgumentError, /timeout/)
    end
  end

  describe "#write after #try_write" do
    it "lets the queued bytes go first, then writes, so nothing is reordered" do
      filled = fill_up(pair[0])
      io.try_write("1 queued, ")
      writer = ev.spawn { io.write("2 written") }
      ev.spawn do
        ev.sleep(0.01)
        ev.wrap(peer).read_exactly(filled)
      end
      ev.run
      expect(writer.wait).to eq(9)
      expect(read_available(peer)).to eq("1 queued, 2 written")
    end
  end

  describe "write_high_water" do
    it "defaults to WRITE_HIGH_WATER and is set by Evix::IO.new, Loop#wrap or the writer" do
      expect(io.write_high_water).to eq(Evix::IO::WRITE_HIGH_WATER)
      expect(described_class.new(ev, pair[0], write_high_water: 5).write_high_water).to eq(5)
      expect(ev.wrap(pair[0], write_high_water: 0).write_high_water).to eq(0)
      io.write_high_water = 7
      expect(io.write_high_water).to eq(7)
    end

    it "rejects a negative or non-Integer mark at the call" do
      expect do
        described_class.new(ev, pair[0], write_high_water: -1)
      end.to raise_error(ArgumentError, /write_high_water/)
      expect { described_class.new(ev, pair[0], write_high_water: 1.5) }.to raise_error(TypeError, /write_high_water/)
      expect { io.write_high_water = nil }.to raise_error(TypeError, /write_high_water/)
      expect(io.write_high_water).to eq(Evix::IO::WRITE_HIGH_WATER)
    end

    it "is passed to each connection by Evix::TCPServer and Evix::TCPClient.connect" do
      marks = []
      server = Evix::TCPServer.new(ev, "127.0.0.1", 0, write_high_water: 4096) do |client|
        marks << client.write_high_water
      end
      ev.spawn do
        client = Evix::TCPClient.connect(ev, "127.0.0.1", server.port, write_high_water: 2048)
        marks << client.write_high_water
        client.close
        ev.sleep(0.02)
        server.close
      end
      ev.run
      expect(marks.sort).to eq([2048, 4096])
      expect { Evix::TCPServer.new(ev, "127.0.0.1", 0, write_high_water: -5) {} }
        .to raise_error(ArgumentError, /write_high_water/)
    end
  end

  describe "#remote_address and #local_address" do
    %w[127.0.0.1 ::1].each do |host|
      it "are the two ends of a TCP connection on #{host}, as Addrinfo" do
        server_side = client_side = nil
        server = Evix::TCPServer.new(ev, host, 0) do |client|
          server_side = [client.local_address, client.remote_address]
        end
        ev.spawn do
          client = Evix::TCPClient.connect(ev, host, server.port)
          client_side = [client.local_address, client.remote_address]
          ev.sleep(0.02)
          client.close
          server.close
        end
        ev.run
        (server_local, server_remote) = server_side
        (client_local, client_remote) = client_side
        [*server_side, *client_side].each do |address|
          expect(address).to be_a(Addrinfo)
          expect(address.ip_address).to eq(host)
        end
        expect([server_local.ip_port, client_remote.ip_port]).to eq([server.port, server.port])
        expect(server_remote.ip_port).to eq(client_local.ip_port)
      end
    end

    it "give the socket path of a UNIX connection" do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "s.sock")
        listener = UNIXServer.new(path)
        track_io(listener)
        client = ev.wrap(UNIXSocket.new(path))
        accepted = ev.wrap(listener.accept)
        expect(client.remote_address.unix_path).to eq(path)
        expect(accepted.local_address.unix_path).to eq(path)
        expect(client.local_address).to be_a(Addrinfo)
        client.close
        accepted.close
      end
    end

    it "are nil for an IO that is not a socket, and raise Evix::ClosedError once closed" do
      r, = pipe
      pipe_io = ev.wrap(r)
      expect([pipe_io.remote_address, pipe_io.local_address]).to eq([nil, nil])
      io.close
      expect { io.remote_address }.to raise_error(Evix::ClosedError)
      expect { io.local_address }.to raise_error(Evix::ClosedError)
    end
  end
end
