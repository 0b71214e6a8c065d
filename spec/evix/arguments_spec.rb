# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

# Servers and clients check every argument before they make a socket: a wrong
# one raises at the call, with a message naming the argument and showing the
# value, and leaves nothing behind (no listener on the port, no socket file,
# no descriptor).
RSpec.describe "Arguments of servers and clients" do
  include_context "with a loop"
  before { ev } # made first: its own descriptors are not counted

  let(:dir) { Dir.mktmpdir("evix-args") }
  let(:path) { File.join(dir, "app.sock") }
  let(:port) do
    probe = ::TCPServer.new("127.0.0.1", 0)
    probe.addr[1].tap { probe.close }
  end

  after { FileUtils.rm_rf(dir) }

  def closed_loop
    Evix::Loop.new.tap(&:close)
  end

  # Whether nothing listens on +port+: a connect is refused and a bind works.
  def port_free?(port)
    Socket.tcp("127.0.0.1", port, connect_timeout: 1).close
    false
  rescue Errno::ECONNREFUSED
    ::TCPServer.new("127.0.0.1", port).close
    true
  end

  # Runs the block, which must raise +error+ with a message matching
  # +message+, and checks that it left no descriptor open.
  def expect_rejected(error, message, &)
    before = fd_count
    expect(&).to raise_error(error, message)
    expect(fd_count).to eq(before)
  end

  describe Evix::TCPServer do
    handler = proc { |_client| }
    cases = {
      "loop nil" => [[nil, "127.0.0.1", :port], {}, TypeError, /loop must be an Evix::Loop \(got nil\)/],
      "loop a String" => [["loop", "127.0.0.1", :port], {}, TypeError, /loop must be an Evix::Loop \(got "loop"\)/],
      "loop closed" => [[:closed_loop, "127.0.0.1", :port], {}, Evix::ClosedError, /loop is closed/],
      "host an Integer" => [[:loop, 127, :port], {}, TypeError, /host must be a String or nil \(got 127\)/],
      "host empty" => [[:loop, "", :port], {}, ArgumentError, /host must not be empty/],
      "host unknown" => [[:loop, "a..b", :port], {}, SocketError, /a\.\.b:\d+/],
      "port nil" => [[:loop, "127.0.0.1", nil], {}, ArgumentError, /a port is needed/],
      "port a String" => [[:loop, "127.0.0.1", "80"], {}, TypeError, /port must be an Integer \(got "80"\)/],
      "port out of range" => [[:loop, "127.0.0.1", 70_000], {}, ArgumentError,
                              /port must be between 0 and 65535 \(got 70000\)/],
      "backlog a String" => [[:loop, "127.0.0.1", :port], { backlog: "9" }, TypeError,
                             /backlog must be an Integer \(got "9"\)/],
      "backlog zero" => [[:loop, "127.0.0.1", :port], { backlog: 0 }, ArgumentError,
                         /backlog must be positive \(got 0\)/],
      "reuse_port not a boolean" => [[:loop, "127.0.0.1", :port], { reuse_port: "yes" }, TypeError,
                                     /reuse_port must be true or false \(got "yes"\)/],
      "idle_timeout negative" => [[:loop, "127.0.0.1", :port], { idle_timeout: -1 }, ArgumentError,
                                  /idle_timeout must be a finite, non-negative number of seconds \(got -1\)/],
      "write_high_water a Float" => [[:loop, "127.0.0.1", :port], { write_high_water: 1.5 }, TypeError,
                                     /write_high_water must be an Integer number of bytes \(got 1.5\)/],
      "ssl_context a String" => [[:loop, "127.0.0.1", :port], { ssl_context: "tls" }, TypeError,
                                 /ssl_context must be an OpenSSL::SSL::SSLContext \(got "tls"\)/],
      "handshake_timeout without ssl_context" => [[:loop, "127.0.0.1", :port], { handshake_timeout: 1 },
                                                  ArgumentError, /handshake_timeout needs an ssl_context/],
      "no block" => [[:loop, "127.0.0.1", :port], { block: nil }, ArgumentError, /requires a block/]
    }
    cases.each do |name, (args, options, error, message)|
      it "raises for #{name}, and nothing listens on the port" do
        options = options.dup
        block = options.key?(:block) ? options.delete(:block) : handler
        args = args.map do |arg|
          { loop: ev, port: port, closed_loop: (closed_loop if arg == :closed_loop) }.fetch(arg, arg)
        end
        expect_rejected(error, message) { Evix::TCPServer.new(*args, **options, &block) }
        expect(port_free?(port)).to be(true)
      end
    end

    it "closes its listener when the loop refuses to watch it (another thread's loop)" do
      other = nil
      Thread.new { other = Evix::Loop.new }.join
      expect_rejected(Evix::Error, /thread/) { Evix::TCPServer.new(other, "127.0.0.1", port, &handler) }
      expect(port_free?(port)).to be(true)
    ensure
      other&.close rescue Evix::Error # rubocop:disable Style/RescueModifier -- it belongs to the finished thread
    end
  end

  describe Evix::UNIXServer do
    handler = proc { |_client| }
    cases = {
      "loop nil" => [[nil, :path], {}, TypeError, /loop must be an Evix::Loop \(got nil\)/],
      "loop closed" => [%i[closed_loop path], {}, Evix::ClosedError, /loop is closed/],
      "path nil" => [[:loop, nil], {}, TypeError, /path must be a String or respond to #to_path \(got nil\)/],
      "path empty" => [[:loop, ""], {}, ArgumentError, /path must not be empty/],
      "path with a NUL byte" => [[:loop, "a\0b"], {}, ArgumentError, /path must not contain a NUL byte/],
      "path too long" => [[:loop, "/tmp/#{"x" * 200}"], {}, ArgumentError, /path is too long for a UNIX socket/],
      "backlog a String" => [%i[loop path], { backlog: "9" }, TypeError, /backlog must be an Integer \(got "9"\)/],
      "idle_timeout NaN" => [%i[loop path], { idle_timeout: Float::NAN }, ArgumentError,
                             /idle_timeout .* \(got NaN\)/],
      "write_high_water negative" => [%i[loop path], { write_high_water: -1 }, ArgumentError,
                                      /write_high_water must not be negative \(got -1\)/],
      "no block" => [%i[loop path], { block: nil }, ArgumentError, /requires a block/]
    }
    cases.each do |name, (args, options, error, message)|
      it "raises for #{name}, and leaves no socket file" do
        options = options.dup
        block = options.key?(:block) ? options.delete(:block) : handler
        args = args.map do |arg|
          { loop: ev, path: path, closed_loop: (closed_loop if arg == :closed_loop) }.fetch(arg, arg)
        end
        expect_rejected(error, message) { Evix::UNIXServer.new(*args, **options, &block) }
        expect(Dir.children(dir)).to be_empty
      end
    end

    it "removes its socket file when the loop refuses to watch it (another thread's loop)" do
      other = nil
      Thread.new { other = Evix::Loop.new }.join
      expect_rejected(Evix::Error, /thread/) { Evix::UNIXServer.new(other, path, &handler) }
      expect(Dir.children(dir)).to be_empty
    ensure
      other&.close rescue Evix::Error # rubocop:disable Style/RescueModifier -- it belongs to the finished thread
    end
  end

  describe Evix::TCPClient do
    # Calls connect inside a task with the loop swapped in; the outcome as data.
    def connect_outcome(*args, **options)
      before = fd_count
      task = ev.spawn do
        args = args.map { |arg| { loop: ev, closed_loop: (closed_loop if arg == :closed_loop) }.fetch(arg, arg) }
        Evix::TCPClient.connect(*args, **options)
        :connected
      rescue StandardError => e
        [e.class, e.message]
      end
      outcome = task.wait
      [outcome, fd_count - before]
    end

    {
      "loop nil" => [[nil, "127.0.0.1", 1], {}, TypeError, /loop must be an Evix::Loop \(got nil\)/],
      "loop closed" => [[:closed_loop, "127.0.0.1", 1], {}, Evix::ClosedError, /loop is closed/],
      "host nil" => [[:loop, nil, 1], {}, TypeError, /host must be a String \(got nil\)/],
      "port a String" => [[:loop, "127.0.0.1", "80"], {}, TypeError, /port must be an Integer \(got "80"\)/],
      "timeout negative" => [[:loop, "127.0.0.1", 1], { timeout: -2 }, ArgumentError, /timeout .* \(got -2\)/],
      "attempt_delay a String" => [[:loop, "127.0.0.1", 1], { attempt_delay: "1" }, TypeError,
                                   /attempt_delay must be a Numeric number of seconds \(got "1"\)/],
      "write_high_water nil" => [[:loop, "127.0.0.1", 1], { write_high_water: nil }, TypeError,
                                 /write_high_water must be an Integer number of bytes \(got nil\)/],
      "verify: without ssl_context" => [[:loop, "127.0.0.1", 1], { verify: false }, ArgumentError,
                                        /need an ssl_context/]
    }.each do |name, (args, options, error, message)|
      it "raises for #{name}, having opened no socket" do
        (klass, text), opened = connect_outcome(*args, **options)
        expect(klass).to eq(error)
        expect(text).to match(message)
        expect(opened).to eq(0)
      end
    end

    it "names the host and port when the name does not resolve, with the caller's frames" do
      outcome = ev.spawn do
        Evix::TCPClient.connect(ev, "a..b", 7000, timeout: 5)
      rescue SocketError => e
        [e.message, e.backtrace.first(8).join("\n")]
      end.wait
      expect(outcome[0]).to start_with("a..b:7000: ")
      expect(outcome[1]).to include(__FILE__)
    end

    it "names the host and port when the connection is refused" do
      free = port
      outcome = ev.spawn do
        Evix::TCPClient.connect(ev, "127.0.0.1", free, timeout: 5)
      rescue SystemCallError => e
        [e.class, e.message]
      end.wait
      expect(outcome).to eq([Errno::ECONNREFUSED, "Connection refused - 127.0.0.1:#{free}"])
    end
  end

  describe Evix::UNIXClient do
    {
      "loop nil" => [nil, :path, TypeError, /loop must be an Evix::Loop \(got nil\)/],
      "path nil" => [:loop, nil, TypeError, /path must be a String or respond to #to_path \(got nil\)/]
    }.each do |name, (loop_arg, path_arg, error, message)|
      it "raises for #{name}, having opened no socket" do
        before = fd_count
        outcome = ev.spawn do
          Evix::UNIXClient.connect(loop_arg == :loop ? ev : loop_arg, path_arg == :path ? path : path_arg)
        rescue StandardError => e
          [e.class, e.message]
        end.wait
        expect(outcome[0]).to eq(error)
        expect(outcome[1]).to match(message)
        expect(fd_count).to eq(before)
      end
    end
  end

  describe Evix::Workers do
    setup = proc { |_loop, _listener| }
    {
      "host an Integer" => [[127, :port], {}, TypeError, /host must be a String or nil \(got 127\)/],
      "port a String" => [["127.0.0.1", "80"], {}, TypeError, /port must be an Integer \(got "80"\)/],
      "count zero" => [["127.0.0.1", :port], { count: 0 }, ArgumentError, /count must be positive \(got 0\)/],
      "timeout negative" => [["127.0.0.1", :port], { timeout: -1 }, ArgumentError, /timeout .* \(got -1\)/],
      "backlog a String" => [["127.0.0.1", :port], { backlog: "9" }, TypeError,
                             /backlog must be an Integer \(got "9"\)/],
      "no block" => [["127.0.0.1", :port], { block: nil }, ArgumentError, /requires a block/]
    }.each do |name, (args, options, error, message)|
      it "raises for #{name}, and nothing listens on the port" do
        options = { count: 1, **options }
        block = options.key?(:block) ? options.delete(:block) : setup
        args = args.map { |arg| arg == :port ? port : arg }
        expect_rejected(error, message) { Evix::Workers.new(*args, **options, &block) }
        expect(port_free?(port)).to be(true)
      end
    end
  end
end

# The seconds rule is the loop's own (helpers/args.rs): Ruby checks call it
# through Evix::Arguments.seconds, so every duration evix takes is refused the
# same way, with the same message.
RSpec.describe Evix::Arguments do
  include_context "with a loop"

  # The exception class and message of the block, or :accepted.
  def refusal
    yield
    :accepted
  rescue StandardError => e
    [e.class, e.message]
  end

  describe ".seconds" do
    it "returns the value as given: an Integer, Float, Rational or other real Numeric" do
      [0, 3, 0.25, -0.0, Rational(1, 3), (2**64) - 4096, 2**63].each do |good|
        expect(Evix::Arguments.seconds(good, "timeout")).to equal(good)
      end
    end

    {
      "a String" => ["1", TypeError, 'timeout must be a Numeric number of seconds (got "1")'],
      "nil" => [nil, TypeError, "timeout must be a Numeric number of seconds (got nil)"],
      "negative" => [-1, ArgumentError, "timeout must be a finite, non-negative number of seconds (got -1)"],
      "a negative Rational" => [Rational(-1, 2), ArgumentError,
                                "timeout must be a finite, non-negative number of seconds (got (-1/2))"],
      "NaN" => [Float::NAN, ArgumentError, "timeout must be a finite, non-negative number of seconds (got NaN)"],
      "infinite" => [Float::INFINITY, ArgumentError,
                     "timeout must be a finite, non-negative number of seconds (got Infinity)"],
      "a Complex" => [Complex(1, 1), ArgumentError,
                      "timeout must be a finite, non-negative number of seconds (got (1+1i))"],
      "a Complex with no imaginary part" => [Complex(1, 0), ArgumentError,
                                             "timeout must be a finite, non-negative number of seconds (got (1+0i))"],
      "2**64" => [2**64, ArgumentError, "timeout is too large (got 18446744073709551616)"],
      "1e300" => [1e300, ArgumentError, "timeout is too large (got 1.0e+300)"]
    }.each do |name, (bad, error, message)|
      it "refuses #{name} with the message the loop's own methods give" do
        expect(refusal { Evix::Arguments.seconds(bad, "timeout") }).to eq([error, message])
        expect(refusal { ev.run_once(bad) }).to eq([error, message]) unless bad.nil? # nil: no timeout
        expect(refusal { ev.add_timer(bad) { nil } }).to eq([error, message.sub("timeout", "delay")])
      end
    end

    it "names the argument it is given" do
      expect { Evix::Arguments.seconds(-2, "attempt_delay") }
        .to raise_error(ArgumentError, "attempt_delay must be a finite, non-negative number of seconds (got -2)")
    end
  end

  describe ".open_loop" do
    it "returns an open loop, and refuses anything else or a closed loop, showing it" do
      expect(Evix::Arguments.open_loop(ev)).to equal(ev)
      expect { Evix::Arguments.open_loop(:loop) }
        .to raise_error(TypeError, "loop must be an Evix::Loop (got :loop)")
      closed = Evix::Loop.new.tap(&:close)
      expect { Evix::Arguments.open_loop(closed) }.to raise_error(Evix::ClosedError, /loop is closed/)
    end
  end
end
