# frozen_string_literal: true

require "spec_helper"

# Evix::IO's buffered input: gets and its options against stdlib IO#gets,
# readpartial, eof?, and every reader sharing one buffer.
EachBackend.describe Evix::IO, "buffered input" do
  include_context "an Evix::IO on a socket pair"

  # What stdlib IO#gets returns, call after call until nil, for +data+.
  def stdlib_lines(data, args, kwargs)
    r, w = pipe
    r.binmode
    w.write(data)
    w.close
    lines = []
    while (line = r.gets(*args, **kwargs))
      lines << line
    end
    lines
  end

  # What Evix::IO#gets returns for +data+, sent by another task in pieces
  # of +piece+ bytes with a turn of the loop in between (so lines, and
  # separators, arrive split).
  def evix_lines(data, piece, args, kwargs)
    a, b = socket_pair
    reader = ev.wrap(a)
    writer = ev.wrap(b)
    ev.spawn do
      (0...data.bytesize).step(piece) do |at|
        writer.write(data.byteslice(at, piece))
        ev.sleep(0) if piece < data.bytesize
      end
      writer.close
    end
    lines = ev.spawn do
      got = []
      while (line = reader.gets(*args, **kwargs))
        got << line
      end
      got
    end.wait
    reader.close
    lines
  end

  describe "#gets, line for line the same as stdlib IO#gets" do
    inputs = [
      "one\ntwo\r\nthree\n\nfour",
      "a\r\nb\nc\r",
      "p1\n\n\n\np2\nmore\n\n\nlast\n",
      "\n\n\nx\n\n",
      "ab;;cd;ef;;;g",
      "no separator at all",
      "",
      "caf\u00e9\u00e9\u00e9\nna\u00efve\u00e9\n"
    ].map(&:b)
    calls = [
      [[], {}], [[], { chomp: true }],
      [["\n"], { chomp: true }], [["\r\n"], {}], [["\r\n"], { chomp: true }],
      [[";"], {}], [[";;"], { chomp: true }],
      [[""], {}], [[""], { chomp: true }],
      [[nil], {}],
      [[3], {}], [[3], { chomp: true }], [[1], {}], [[-1], {}],
      [["\n", 4], {}], [["\n", 4], { chomp: true }], [[";", 2], {}], [["\r\n", 3], { chomp: true }],
      [["\u00e9"], {}], [["\u00e9"], { chomp: true }]
    ]

    calls.each do |args, kwargs|
      it "gets(#{[*args.map(&:inspect), *kwargs.map { |k, v| "#{k}: #{v}" }].join(", ")})" do
        inputs.each do |data|
          # A binary IO takes a non-ASCII separator only as bytes; Evix::IO
          # takes it in any encoding and compares its bytes.
          want = stdlib_lines(data, args.map { |arg| arg.is_a?(String) ? arg.b : arg }, kwargs)
          [1, 2, 5, data.bytesize.clamp(1, nil)].uniq.each do |piece|
            got = evix_lines(data, piece, args, kwargs)
            expect(got).to eq(want), "#{data.inspect} in pieces of #{piece}: got #{got.inspect}, want #{want.inspect}"
          end
        end
      end
    end

    it "reads to end of file with a nil separator, chomp or not (Ruby 3.1's IO#gets chomps there, 3.3's does not)" do
      peer.write("a\nb\r\n")
      peer.close
      expect(in_task { [io.gets(nil, chomp: true), io.gets(nil, chomp: true)] }).to eq(["a\nb\r\n", nil])
    end

    it "returns binary Strings, each a String of its own" do
      peer.write("x\ny\n")
      lines = in_task { [io.gets, io.gets] }
      expect(lines.map(&:encoding)).to eq([Encoding::BINARY] * 2)
      lines[0] << "changed"
      peer.write("z\n")
      expect(in_task { io.gets }).to eq("z\n")
    end

    it "reads 100,000 buffered lines, and a line far longer than a read chunk, every byte in order" do
      long = "L" * ((3 * Evix::IO::CHUNK) + 5)
      count = GC.stress ? 2_000 : 100_000 # under rake spec:gc_stress 100,000 lines outlast the deadline
      lines = Array.new(count) { |i| "line #{i}\r\n" }
      lines.insert(count / 2, "#{long}\r\n")
      data = lines.join
      writer = ev.spawn do
        out = ev.wrap(peer)
        out.write(data)
        out.close
      end
      got = in_task do
        read = []
        while (line = io.gets("\r\n"))
          read << line
        end
        read
      end
      writer.wait
      expect(got.size).to eq(lines.size)
      expect(got == lines).to be(true)
    end

    it "raises TypeError at the call for a separator or limit of the wrong type, and loses no input" do
      peer.write("keep\n")
      in_task do
        expect { io.gets(1.5) }.to raise_error(TypeError, /separator/)
        expect { io.gets(:x) }.to raise_error(TypeError, /separator/)
        expect { io.gets("\n", "3") }.to raise_error(TypeError, /limit/)
        expect { io.gets("\n", 2.0) }.to raise_error(TypeError, /limit/)
        expect { io.gets(timeout: -1) }.to raise_error(ArgumentError, /timeout/)
      end
      expect(in_task { io.gets }).to eq("keep\n")
    end

    it "raises Evix::ClosedError when the IO is closed, even with a line buffered" do
      peer.write("one\ntwo\n")
      expect(in_task { io.gets }).to eq("one\n")
      io.close
      expect { in_task { io.gets } }.to raise_error(Evix::ClosedError)
      expect { in_task { io.gets(chomp: true) } }.to raise_error(Evix::ClosedError)
    end
  end

  describe "#readpartial" do
    it "returns what is buffered first, up to maxlen, and waits only when nothing is" do
      peer.write("line\nrest of it")
      got = in_task { [io.gets, io.readpartial(4), io.readpartial(100)] }
      expect(got).to eq(["line\n", "rest", " of it"])
      late = ev.spawn { io.readpartial(100) }
      ev.spawn do
        ev.sleep(0.01)
        peer.write("late")
      end
      expect(late.wait).to eq("late")
    end

    it "raises EOFError at end of file, every time, after what was buffered" do
      peer.write("tail")
      peer.close
      expect(in_task { io.readpartial(10) }).to eq("tail")
      2.times { expect { in_task { io.readpartial(10) } }.to raise_error(EOFError) }
    end

    it "fills and returns the buffer it is given, and clears it at end of file" do
      peer.write("abc")
      peer.close
      buffer = +"old contents"
      expect(in_task { io.readpartial(10, buffer) }).to equal(buffer)
      expect(buffer).to eq("abc")
      expect { in_task { io.readpartial(10, buffer) } }.to raise_error(EOFError)
      expect(buffer).to eq("")
    end

    it "returns an empty String for maxlen 0 without waiting" do
      expect(in_task { io.readpartial(0) }).to eq("")
    end

    it "checks maxlen and the buffer at the call, and loses no input" do
      peer.write("kept")
      in_task do
        expect { io.readpartial(-1) }.to raise_error(ArgumentError, /negative/)
        expect { io.readpartial(nil) }.to raise_error(TypeError, /maxlen/)
        expect { io.readpartial("4") }.to raise_error(TypeError, /maxlen/)
        expect { io.readpartial(4, :buffer) }.to raise_error(TypeError, /buffer/)
        expect { io.readpartial(4, timeout: "1") }.to raise_error(TypeError, /timeout/)
      end
      expect(in_task { io.readpartial(10) }).to eq("kept")
    end

    it "raises Evix::TimeoutError when nothing comes in time" do
      expect { in_task { io.readpartial(10, timeout: 0.02) } }.to raise_error(Evix::TimeoutError)
    end
  end

  describe "#eof?" do
    it "is false while input is buffered, without reading" do
      peer.write("a\nb")
      expect(in_task { [io.gets, io.eof?, io.read] }).to eq(["a\n", false, "b"])
    end

    it "waits for input like IO#eof?, and keeps what it read for the next read" do
      answer = ev.spawn { [io.eof?, io.gets] }
      ev.spawn do
        ev.sleep(0.01)
        peer.write("hello\n")
      end
      expect(answer.wait).to eq([false, "hello\n"])
    end

    it "is true at end of file, and after close_read" do
      peer.write("x")
      peer.close
      expect(in_task { [io.eof?, io.read, io.eof?, io.eof?] }).to eq([false, "x", true, true])
      a, b = socket_pair
      other = ev.wrap(a)
      b.write("line\nbuffered")
      expect(in_task { [other.gets, other.close_read, other.eof?, other.read, other.eof?] })
        .to eq(["line\n", nil, false, "buffered", true])
    end

    it "raises Evix::TimeoutError when nothing comes in time, and Evix::ClosedError once closed" do
      expect { in_task { io.eof?(timeout: 0.02) } }.to raise_error(Evix::TimeoutError)
      io.close
      expect { in_task { io.eof? } }.to raise_error(Evix::ClosedError)
    end
  end

  describe "one buffer for every read method" do
    it "hands out each byte once, in order, whatever mix of calls reads it" do
      random = Random.new(11)
      data = Array.new(3000) { |i| "#{"x" * random.rand(0..40)}#{i}\n" }.join
      writer = ev.spawn do
        out = ev.wrap(peer)
        out.write(data)
        out.close
      end
      got = in_task do
        parts = []
        loop do
          part = case random.rand(6)
                 when 0 then io.gets
                 when 1 then io.gets(chomp: true)&.then { |line| "#{line}\n" }
                 when 2 then io.read(random.rand(1..100))
                 when 3 then io.read_exactly(random.rand(1..50))
                 when 4 then io.eof? ? nil : io.readpartial(random.rand(1..70))
                 else io.gets(";", random.rand(1..30))
                 end
          break unless part

          parts << part
        rescue EOFError
          # read_exactly past the end leaves the partial bytes to the next read.
          parts << io.read
          expect(io.read).to be_nil
          break
        end
        parts
      end
      writer.wait
      expect(got.join == data).to be(true)
    end
  end
end
