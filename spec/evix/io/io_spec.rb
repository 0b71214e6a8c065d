# frozen_string_literal: true

require "spec_helper"
require "digest"

EachBackend.describe Evix::IO do
  include_context "an Evix::IO on a socket pair"

  describe "construction" do
    it "wraps an IO through Evix::Loop#wrap and exposes it" do
      expect(io).to be_a(described_class)
      expect(io.io).to equal(pair[0])
      expect(io.closed?).to be(false)
      expect(io.fileno).to eq(pair[0].fileno)
      expect(io.timeout).to be_nil
      expect(ev.wrap(peer, timeout: 1.5).timeout).to eq(1.5)
    end

    # Each half is a module of its own file; only io.rb says "class IO".
    it "is defined in one Ruby file, io.rb, with its halves as modules of their own" do
      owners = [Evix::IO, Evix::IO.singleton_class, Evix::IOInput, Evix::IOOutput].to_h do |mod|
        names = mod.instance_methods(false) + mod.private_instance_methods(false)
        paths = names.filter_map { |name| mod.instance_method(name).source_location&.first }
        [mod, paths.map { |path| File.basename(path) }.uniq]
      end
      expect(owners).to eq(Evix::IO => ["io.rb"], Evix::IO.singleton_class => ["io.rb"],
                           Evix::IOInput => ["io_input.rb"], Evix::IOOutput => ["io_output.rb"])
      expect(Evix::IO.ancestors.take(3)).to eq([Evix::IO, Evix::IOOutput, Evix::IOInput])
    end

    it "accepts an object that responds to to_io" do
      holder = Struct.new(:inner) do
        def to_io
          inner
        end
      end.new(peer)
      wrapped = ev.wrap(holder)
      expect(wrapped.io).to equal(peer)
    end

    it "raises TypeError naming the argument for something that is not an IO" do
      expect { ev.wrap(42) }.to raise_error(TypeError, /io/)
      expect { ev.wrap("not an io") }.to raise_error(TypeError, /io/)
      expect { described_class.new(ev, nil) }.to raise_error(TypeError, /io/)
    end

    it "raises Evix::ClosedError for a closed IO" do
      r, = pipe
      r.close
      expect { ev.wrap(r) }.to raise_error(Evix::ClosedError)
    end
  end

  describe "#read" do
    it "returns what is available, up to maxlen" do
      peer.write("hello world")
      expect(in_task { [io.read(5), io.read(100)] }).to eq(["hello", " world"])
    end

    it "waits for data without blocking other tasks" do
      log = []
      reader = ev.spawn do
        log << :reading
        data = io.read
        log << :read
        data
      end
      ev.spawn do
        log << :writing
        ev.sleep(0.02)
        peer.write("late")
      end
      ev.run
      expect(log).to eq(%i[reading writing read])
      expect(reader.wait).to eq("late")
    end

    it "returns nil at end of file, every time, after what was buffered" do
      peer.write("tail")
      peer.close
      expect(in_task { [io.read(2), io.read, io.read, io.read] }).to eq(["ta", "il", nil, nil])
    end

    it "returns nil when the peer closes while it waits (no EOFError)" do
      reader = ev.spawn { io.read }
      ev.spawn do
        ev.sleep(0.02)
        peer.close
      end
      expect(reader.wait).to be_nil
    end

    # A reset is not an end of file: a body cut short must never look
    # complete. As Ruby's own sockets, each read hands out the bytes that
    # came, then raises Errno::ECONNRESET.
    describe "when the TCP peer resets the connection (SO_LINGER 0)" do
      # An accepted connection of +ev+ whose peer sent +data+, then reset it.
      def reset_after(data)
        server = track_io(TCPServer.new("127.0.0.1", 0)).first
        client = track_io(TCPSocket.new("127.0.0.1", server.addr[1])).first
        accepted = track_io(server.accept).first
        client.write(data)
        client.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
        client.close
        ev.wrap(accepted)
      end

      it "#read raises Errno::ECONNRESET while it waits" do
        server = track_io(TCPServer.new("127.0.0.1", 0)).first
        client = track_io(TCPSocket.new("127.0.0.1", server.addr[1])).first
        wrapped = ev.wrap(track_io(server.accept).first)
        reader = ev.spawn { wrapped.read }
        ev.spawn do
          ev.sleep(0.02)
          client.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
          client.close
        end
        expect { reader.wait }.to raise_error(Errno::ECONNRESET)
      end

      it "#read hands out what came, then raises Errno::ECONNRESET" do
        wrapped = reset_after("partial")
        got = +""
        expect { in_task { while (chunk = wrapped.read) do got << chunk end } }.to raise_error(Errno::ECONNRESET)
        expect(got).to eq("partial")
      end

      it "#read_exactly raises Errno::ECONNRESET, not EOFError or nil" do
        wrapped = reset_after("12345")
        expect(in_task { wrapped.read_exactly(3) }).to eq("123")
        expect { in_task { wrapped.read_exactly(3) } }.to raise_error(Errno::ECONNRESET)
      end

      it "#gets hands out the whole lines, then raises Errno::ECONNRESET for the cut one" do
        wrapped = reset_after("one\ntw")
        expect(in_task { wrapped.gets }).to eq("one\n")
        expect { in_task { wrapped.gets } }.to raise_error(Errno::ECONNRESET)
      end

      it "#gets with keywords, #readpartial and #eof? raise Errno::ECONNRESET" do
        expect { in_task { reset_after("x").gets(chomp: true) } }.to raise_error(Errno::ECONNRESET)
        wrapped = reset_after("")
        expect { in_task { wrapped.readpartial(10) } }.to raise_error(Errno::ECONNRESET)
        expect { in_task { reset_after("").eof? } }.to raise_error(Errno::ECONNRESET)
      end

      it "an 8 MB upload reset part way: the read loop raises Errno::ECONNRESET, never a clean end" do
        server = track_io(TCPServer.new("127.0.0.1", 0)).first
        client = track_io(TCPSocket.new("127.0.0.1", server.addr[1])).first
        wrapped = ev.wrap(track_io(server.accept).first)
        uploader = Thread.new do
          chunk = "u" * (1024 * 1024)
          4.times { client.write(chunk) } # half of the 8 MB, then the reset
          client.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
          client.close
        end
        received = 0
        outcome = begin
          in_task { while (chunk = wrapped.read(64 * 1024)) do received += chunk.bytesize end }
          :end_of_file
        rescue Errno::ECONNRESET
          :reset
        end
        uploader.join
        expect(outcome).to eq(:reset)
        expect(received).to be <= 4 * 1024 * 1024
      end
    end

    # A short read says the kernel buffer is drained: reading again at once
    # would only pay a read that fails with EAGAIN.
    it "waits after a short read from a socket before reading it again" do
      reads = []
      io.singleton_class.prepend(Module.new do
        define_method(:read_socket) { |*args| super(*args).tap { |chunk| reads << chunk } }
      end)
      sender = ev.wrap(peer)
      ev.spawn do
        5.times do
          io.read(100)
          io.write("ok")
        end
      end
      ev.spawn do
        5.times do |i|
          sender.write("m#{i}")
          sender.read_exactly(2)
        end
      end
      ev.run
      # Only the first read, made before anything was sent, found nothing.
      expect(reads).to eq([:wait_readable, "m0", "m1", "m2", "m3", "m4"])
    end

    it "gives the other tasks a turn after FAIR_READS full reads in a row" do
      peer.write("x" * 4 * 40)
      reads = 0
      turns = []
      reader = ev.spawn do
        40.times do
          io.read(4)
          reads += 1
        end
      end
      ev.spawn do
        turns << reads
        ev.sleep(0)
        turns << reads
      end
      ev.run
      expect(reader.wait).to eq(40)
      expect(turns.first).to eq(Evix::IO::FAIR_READS)
    end

    it "returns binary strings" do
      peer.write("h\u00e9".encode("UTF-8"))
      data = in_task { io.read }
      expect(data.encoding).to eq(Encoding::BINARY)
      expect(data.bytes).to eq([104, 0xc3, 0xa9])
    end
  end

  describe "#read_exactly" do
    it "waits until it has exactly that many bytes, across several writes" do
      reader = ev.spawn { [io.read_exactly(6), io.read_exactly(2)] }
      ev.spawn do
        peer.write("abc")
        ev.sleep(0.01)
        peer.write("defgh")
      end
      expect(reader.wait).to eq(%w[abcdef gh])
    end

    it "returns nil at end of file before the first byte" do
      peer.close
      expect(in_task { io.read_exactly(4) }).to be_nil
    end

    it "raises EOFError when the stream ends part way" do
      peer.write("abc")
      peer.close
      expect { in_task { io.read_exactly(5) } }.to raise_error(EOFError, /3 of 5/)
    end
  end

  describe "#gets" do
    it "reads lines ending in $/, then the unterminated rest, then nil" do
      peer.write("line1\nline2\npartial")
      peer.close
      lines = in_task { Array.new(4) { io.gets } }
      expect(lines).to eq(["line1\n", "line2\n", "partial", nil])
    end

    it "waits for a line split across several writes" do
      reader = ev.spawn { io.gets }
      ev.spawn do
        peer.write("hel")
        ev.sleep(0.01)
        peer.write("lo\nnext")
      end
      expect(reader.wait).to eq("hello\n")
    end

    it "splits on a custom, multi-byte separator even when it arrives in two pieces" do
      reader = ev.spawn { [io.gets("\r\n"), io.gets("\r\n")] }
      ev.spawn do
        peer.write("a\r")
        ev.sleep(0.01)
        peer.write("\nb\r\n")
      end
      expect(reader.wait).to eq(["a\r\n", "b\r\n"])
    end

    it "returns at most limit bytes with gets(limit), still splitting on $/" do
      peer.write("abcdefgh\nxy\n")
      peer.close
      expect(in_task { [io.gets(3), io.gets(3), io.gets(10), io.gets(10)] }).to eq(%W[abc def gh\n xy\n])
    end

    it "honours both a separator and a limit" do
      peer.write("ab;cdefg;")
      peer.close
      expect(in_task { [io.gets(";", 5), io.gets(";", 3), io.gets(";", 5), io.gets(";", 5)] })
        .to eq(["ab;", "cde", "fg;", nil])
    end

    it "does not return empty strings forever for an empty separator (paragraph mode, or ArgumentError)" do
      peer.write("p1\n\n\np2\n")
      peer.close
      result = begin
        in_task { Array.new(3) { io.gets("") } }
      rescue ArgumentError => e
        e
      end
      expect(result).to be_a(ArgumentError).or eq(["p1\n\n", "p2\n", nil])
    end

    it "returns nil at end of file, never EOFError" do
      peer.close
      expect(in_task { [io.gets, io.gets("\n", 4)] }).to eq([nil, nil])
    end
  end

  describe "#each_line" do
    it "yields every line until end of file and returns self" do
      lines = []
      ev.spawn do
        expect(io.each_line { |line| lines << line }).to equal(io)
      end
      ev.spawn do
        peer.write("one\ntwo\n")
        ev.sleep(0.01)
        peer.write("three")
        peer.close
      end
      ev.run
      expect(lines).to eq(%W[one\n two\n three])
    end

    it "takes a separator and returns an Enumerator without a block" do
      peer.write("a,b,c")
      peer.close
      expect(in_task { io.each_line(",").to_a }).to eq(["a,", "b,", "c"])
    end
  end

  describe "#write" do
    it "writes the whole string and returns its byte size" do
      expect(in_task { io.write("h\u00e9llo") }).to eq(6)
      expect(in_task { io.write(42) }).to eq(2)
      expect(peer.read_nonblock(100)).to eq("h\u00e9llo42".b)
    end

    it "writes several MB to a slow reader, waiting whenever the kernel buffer is full", timing: true do
      data = Random.new(7).bytes(6 * 1024 * 1024)
      received = String.new(encoding: Encoding::BINARY)
      reader = helper_thread do
        reads = 0
        while (chunk = peer.read(32 * 1024))
          received << chunk
          reads += 1
          sleep 0.001 if (reads % 8).zero?
        end
      end
      writer = ev.spawn do
        written = io.write(data)
        io.close
        written
      end
      took = elapsed { expect(writer.wait).to eq(data.bytesize) }
      reader.join(5)
      expect(took).to be < 8
      expect(received.bytesize).to eq(data.bytesize)
      expect(Digest::SHA256.hexdigest(received)).to eq(Digest::SHA256.hexdigest(data))
    end

    it "sends the bytes the string had at the call even if the caller changes it while the write waits" do
      [0, 1000].each do |room| # 0: waits before writing anything; 1000: after a partial write
        a, b = socket_pair
        filled = fill_up(a)
        b.read(room) if room.positive?
        data = +("A" * 200_000)
        writer = ev.spawn { ev.wrap(a).write(data) }
        received = ev.spawn do
          ev.sleep(0.01)
          data.replace("B" * 200_000) # while the write waits
          ev.wrap(b).read_exactly(filled - room + 200_000)
        end
        ev.run
        expect(writer.wait).to eq(200_000)
        expect(received.wait.byteslice(filled - room, 200_000)).to eq("A" * 200_000), "room #{room}"
      end
    end

    it "raises Errno::EPIPE (not a silent success) when the peer is gone" do
      peer.close
      expect { in_task { io.write("x" * 1_000_000) } }.to raise_error(Errno::EPIPE)
    end
  end

  # Sockets go through recv/send in the extension, everything else through
  # Ruby's read_nonblock/write_nonblock; either way the bytes are the same.
  describe "sockets and other IOs" do
    it "reads and writes a pipe (not a socket) the same way" do
      r, w = pipe
      reader = ev.wrap(r)
      writer = ev.wrap(w)
      lines = in_task do
        writer.write("one\ntwo\n")
        writer.write(:three)
        writer.close
        [reader.gets, reader.read(2), reader.read, reader.read]
      end
      expect(lines).to eq(["one\n", "tw", "o\nthree", nil])
    end

    it "first serves bytes that Ruby's own buffer of the socket already holds" do
      peer.write("head\ntail")
      # IO#gets reads what is there into the IO's buffer and leaves "tail" in it.
      expect(pair[0].gets).to eq("head\n")
      expect(in_task { io.read }).to eq("tail")
      peer.write("more")
      expect(in_task { io.read }).to eq("more")
    end

    it "reads more than 64 KiB at once when asked to, every byte in order" do
      data = Random.new(7).bytes(300_000)
      writer = ev.spawn { ev.wrap(peer).write(data) }
      chunks = in_task do
        got = []
        got << io.read(200_000) while got.sum(&:bytesize) < data.bytesize
        got
      end
      writer.wait
      expect(chunks.join).to eq(data)
      expect(chunks.map(&:bytesize).max).to be <= 200_000
    end

    it "raises Errno::EPIPE, not SIGPIPE, even where SIGPIPE is not ignored" do
      peer.close
      child = fork do
        trap("PIPE", "SYSTEM_DEFAULT")
        outcome = begin
          in_task { io.write("x" * 100_000) }
          :written
        rescue Errno::EPIPE
          :epipe
        end
        exit!(outcome == :epipe ? 0 : 1)
      end
      _, status = Process.wait2(child)
      expect(status.signaled?).to be(false), "killed by signal #{status.termsig}"
      expect(status.exitstatus).to eq(0)
    end
  end

  describe "a reader fiber and a writer fiber on the same socket" do
    it "both make progress while both are suspended", timing: true do
      big = Random.new(1).bytes(4 * 1024 * 1024)
      other = ev.wrap(peer)
      log = []
      reader = ev.spawn do
        got = String.new(encoding: Encoding::BINARY)
        while (chunk = io.read)
          log << :reader_got_data if got.empty?
          got << chunk
        end
        got
      end
      writer = ev.spawn do
        io.write(big)
        log << :writer_done
        :written
      end
      peer_task = ev.spawn do
        ev.sleep(0.05) # both fibers above are now waiting: nothing to read, buffer full
        other.write("hello ")
        ev.sleep(0.02)
        received = other.read_exactly(big.bytesize)
        other.write("bye")
        other.close
        received
      end
      expect(elapsed { ev.run }).to be < 5
      expect(log.first).to eq(:reader_got_data)
      expect(log).to include(:writer_done)
      expect(reader.wait).to eq("hello bye")
      expect(writer.wait).to eq(:written)
      expect(peer_task.wait == big).to be(true)
    end
  end

  describe "several fibers reading one IO" do
    it "share the data: each read returns what it took, and every message arrives once" do
      got = []
      readers = Array.new(2) { ev.spawn { 2.times { got << io.read(3) } } }
      ev.spawn do
        4.times do |i|
          peer.write("m#{i}!")
          ev.sleep(0.01)
        end
      end
      ev.run
      readers.each(&:wait)
      expect(got.sort).to eq(%w[m0! m1! m2! m3!])
      expect(ev.stats.values_at(:watchers, :timers)).to eq([0, 0])
    end

    it "are all woken by #close with Evix::ClosedError, and by #close_read with end of file" do
      outcomes = Array.new(3) do
        ev.spawn do
          io.read
        rescue Evix::ClosedError
          :closed
        end
      end
      other = ev.wrap(peer)
      at_eof = Array.new(3) { ev.spawn { other.read } }
      ev.spawn do
        ev.sleep(0.02)
        io.close
        other.close_read
      end
      ev.run
      expect(outcomes.map(&:wait)).to eq(%i[closed closed closed])
      expect(at_eof.map(&:wait)).to eq([nil, nil, nil])
    end

    it "time out one by one while another keeps waiting and then gets the data" do
      impatient = ev.spawn do
        io.read(timeout: 0.02)
      rescue Evix::TimeoutError => e
        e.class
      end
      patient = ev.spawn { io.read }
      ev.spawn do
        ev.sleep(0.05)
        peer.write("late")
      end
      expect([impatient.wait, patient.wait]).to eq([Evix::TimeoutError, "late"])
    end
  end

  describe "timeouts" do
    it "raises Evix::TimeoutError after the per-IO timeout, and the loop keeps working", timing: true do
      io.timeout = 0.1
      outcome = nil
      took = nil
      task = ev.spawn do
        t0 = now
        begin
          io.read
        rescue Evix::TimeoutError => e
          outcome = e
        end
        took = now - t0
        peer.write("after")
        io.read
      end
      expect(task.wait).to eq("after")
      expect(outcome).to be_a(Evix::TimeoutError)
      expect(took).to be >= 0.09
      expect(took).to be < 0.6
    end

    it "takes the timeout from Evix::Loop#wrap(io, timeout:)", timing: true do
      wrapped = ev.wrap(pair[0], timeout: 0.05)
      took = elapsed { expect { in_task { wrapped.gets } }.to raise_error(Evix::TimeoutError) }
      expect(took).to be >= 0.045
      expect(took).to be < 0.5
    end

    it "lets a per-call timeout: override the per-IO one for read, read_exactly, gets and wait_readable",
       timing: true do
      io.timeout = 10
      %i[read read_exactly gets wait_readable].each do |name|
        took = elapsed do
          expect do
            in_task do
              case name
              when :read_exactly then io.read_exactly(4, timeout: 0.05)
              when :gets then io.gets(timeout: 0.05)
              else io.public_send(name, timeout: 0.05)
              end
            end
          end.to raise_error(Evix::TimeoutError, /0.05/)
        end
        expect(took).to be_between(0.045, 0.5), "#{name} took #{took}"
      end
    end

    it "raises Evix::TimeoutError from a write that cannot finish in time", timing: true do
      fill_up(pair[0])
      took = elapsed { expect { in_task { io.write("x" * 100_000, timeout: 0.1) } }.to raise_error(Evix::TimeoutError) }
      expect(took).to be >= 0.09
      expect(took).to be < 0.6
    end

    it "leaves nothing behind: a stale watcher or timer never resumes the task later" do
      took = nil
      task = ev.spawn do
        expect { io.read(timeout: 0.03) }.to raise_error(Evix::TimeoutError)
        peer.write("wakes nobody")
        took = elapsed { ev.sleep(0.1) } # a leftover watcher would end this sleep early
        io.read
      end
      expect(task.wait).to eq("wakes nobody")
      expect(took).to be >= 0.095
      expect(ev.stats).to include(watchers: 0, timers: 0)
    end

    it "does not time out when data arrives in time", timing: true do
      io.timeout = 0.5
      reader = ev.spawn { io.read }
      ev.spawn do
        ev.sleep(0.02)
        peer.write("in time")
      end
      expect(reader.wait).to eq("in time")
      expect(ev.stats).to include(watchers: 0, timers: 0)
    end
  end

  describe "#close" do
    it "wakes a fiber waiting to read with Evix::ClosedError", timing: true do
      outcome = nil
      ev.spawn do
        io.read
        outcome = :returned
      rescue Evix::ClosedError => e
        outcome = e
      end
      ev.spawn do
        ev.sleep(0.02)
        expect(io.close).to be_nil
      end
      expect(elapsed { ev.run }).to be < 0.5
      expect(outcome).to be_a(Evix::ClosedError)
      expect(io.closed?).to be(true)
      expect(pair[0].closed?).to be(true)
    end

    it "wakes a fiber waiting to write with Evix::ClosedError", timing: true do
      fill_up(pair[0])
      outcome = nil
      ev.spawn do
        io.write("y" * 100_000)
        outcome = :returned
      rescue Evix::ClosedError => e
        outcome = e
      end
      ev.add_timer(0.02) { io.close } # from a plain callback, not a task
      expect(elapsed { ev.run }).to be < 0.5
      expect(outcome).to be_a(Evix::ClosedError)
    end

    it "wakes a reader and a writer waiting on the same IO" do
      fill_up(pair[0])
      outcomes = []
      ev.spawn do
        io.gets
      rescue Evix::ClosedError
        outcomes << :reader
      end
      ev.spawn do
        io.write("z" * 100_000)
      rescue Evix::ClosedError
        outcomes << :writer
      end
      ev.spawn do
        ev.sleep(0.02)
        io.close
      end
      ev.run
      expect(outcomes).to contain_exactly(:reader, :writer)
      expect(ev.stats).to include(watchers: 0, timers: 0)
    end

    it "is idempotent" do
      io.close
      expect(io.close).to be_nil
      expect(io.closed?).to be(true)
    end

    it "makes later reads and writes raise Evix::ClosedError" do
      io.close
      expect { in_task { io.read } }.to raise_error(Evix::ClosedError)
      expect { in_task { io.gets } }.to raise_error(Evix::ClosedError)
      expect { in_task { io.read_exactly(1) } }.to raise_error(Evix::ClosedError)
      expect { in_task { io.write("x") } }.to raise_error(Evix::ClosedError)
      expect { in_task { io.wait_readable } }.to raise_error(Evix::ClosedError)
    end

    it "makes later reads raise Evix::ClosedError after a short read, and after close_read" do
      peer.write("a")
      expect(in_task { io.read }).to eq("a") # short: the next read waits first
      io.close
      expect { in_task { io.read } }.to raise_error(Evix::ClosedError, "IO is closed")
      other = ev.wrap(socket_pair[0])
      other.close_read
      expect(in_task { other.read }).to be_nil
      other.close
      expect { in_task { other.read } }.to raise_error(Evix::ClosedError, "IO is closed")
    end

    it "makes later reads raise Evix::ClosedError even when data was buffered before the close" do
      peer.write("line1\nline2\n")
      expect(in_task { io.gets }).to eq("line1\n") # "line2\n" now sits in the buffer
      io.close
      expect { in_task { io.gets } }.to raise_error(Evix::ClosedError)
      expect { in_task { io.read } }.to raise_error(Evix::ClosedError)
    end
  end

  describe "#close_read" do
    it "makes a waiting reader see end of file while writes still work" do
      reader = ev.spawn { io.read }
      ev.spawn do
        ev.sleep(0.02)
        io.close_read
        io.write("still writable")
      end
      expect(reader.wait).to be_nil
      expect(peer.read_nonblock(100)).to eq("still writable")
    end
  end

  describe "outside a task" do
    it "raises Evix::Error from a read that would have to wait" do
      expect { io.read }.to raise_error(Evix::Error, /task/)
      expect { io.gets }.to raise_error(Evix::Error, /task/)
      expect { io.read_exactly(1) }.to raise_error(Evix::Error, /task/)
      expect { io.wait_readable }.to raise_error(Evix::Error, /task/)
    end

    it "raises Evix::Error from a write that would have to wait" do
      fill_up(pair[0])
      expect { io.write("x" * 100_000) }.to raise_error(Evix::Error, /task/)
    end
  end
end
