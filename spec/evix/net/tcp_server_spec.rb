# frozen_string_literal: true

require "spec_helper"
require "stringio"
require "digest"

RSpec.describe Evix::TCPServer do
  include_context "with a loop"

  # A server that the after hook shuts down.
  def server_on(host = "127.0.0.1", port = 0, **options, &)
    track_server(described_class.new(ev, host, port, **options, &))
  end

  # An echo server: every chunk read is written back.
  def echo_server(host = "127.0.0.1", **options)
    server_on(host, 0, **options) do |client|
      while (data = client.read)
        client.write(data)
      end
    end
  end

  def eof?(socket, into = String.new)
    drain(socket, into) == :eof
  end

  describe "construction" do
    it "binds, picks a free port with 0 and reports it" do
      server = echo_server
      expect(server.port).to be_a(Integer).and be > 0
      expect(server.local_address.ip_address).to eq("127.0.0.1")
      expect(server.closed?).to be(false)
      expect(server.connections).to eq(0)
    end

    it "raises ArgumentError without a block" do
      expect { described_class.new(ev, "127.0.0.1", 0) }.to raise_error(ArgumentError, /block/)
    end

    it "raises Errno::EADDRINUSE for a port that is taken, leaving no socket open" do
      taken = track_io(TCPServer.new("127.0.0.1", 0)).first
      expect(ev.closed?).to be(false) # the loop's own descriptors are open before counting
      before = fd_count
      expect { described_class.new(ev, "127.0.0.1", taken.addr[1]) {} }.to raise_error(Errno::EADDRINUSE)
      expect(fd_count).to eq(before)
    end

    it "lets two servers share a port with reuse_port: true" do
      first = server_on("127.0.0.1", 0, reuse_port: true) {}
      second = server_on("127.0.0.1", first.port, reuse_port: true) {}
      expect(second.port).to eq(first.port)
    end
  end

  # Everything after construction waits on sockets: once per backend.
  on_each_backend do
    describe "echo" do
      it "echoes a line through a connection's Evix::IO" do
        server = echo_server
        client = tcp_client(server.port)
        expect(round_trip(ev, client, "hello\n")).to eq("hello\n")
        run_until(ev) { server.connections == 1 }
        client.close
        run_until(ev) { server.connections.zero? }
      end

      it "echoes 1 MiB to a slow reader, holding at most 256 KiB at a time, every byte intact", timing: true do
        max_held = 0
        done = false
        server = server_on do |client|
          while (chunk = client.read)
            max_held = [max_held, chunk.bytesize].max
            client.write(chunk)
          end
          done = true
        end
        payload = Random.new(42).bytes(1024 * 1024)
        # A small receive buffer: the server must wait for the reader, not buffer for it.
        client = tcp_client(server.port, rcvbuf: 16 * 1024)
        writer = helper_thread do
          client.write(payload)
          client.close_write
        end
        reader = helper_thread do
          received = String.new(encoding: Encoding::BINARY)
          loop do
            received << client.readpartial(4096)
            sleep 0.001
          rescue EOFError
            break
          end
          received
        end
        took = elapsed { run_until(ev, timeout: 8) { done } }
        writer.join(2)
        received = reader.value
        expect(took).to be < 8
        expect(max_held).to be <= 256 * 1024
        expect(received.bytesize).to eq(payload.bytesize)
        expect(Digest::SHA256.hexdigest(received)).to eq(Digest::SHA256.hexdigest(payload))
      end

      it "runs one task per connection so a slow connection does not hold up the others", timing: true do
        server = server_on do |client|
          line = client.gets
          ev.sleep(1) if line.start_with?("slow")
          client.write(line)
        end
        slow = tcp_client(server.port)
        fast = tcp_client(server.port)
        slow.write("slow\n")
        took = elapsed { expect(round_trip(ev, fast, "fast\n")).to eq("fast\n") }
        expect(took).to be < 0.8
        expect(receive_bytes(ev, slow, 5)).to eq("slow\n")
      end
    end

    describe "many connections" do
      before do
        soft, hard = Process.getrlimit(:NOFILE)
        Process.setrlimit(:NOFILE, [hard, 8192].min, hard) if soft < 4096
      end

      # 1,000 client tasks in this loop: all connect, wait until every one is
      # connected, then each sends its own message and checks the echo.
      def thousand_clients(server, count = 1000, &connect)
        connected = 0
        max_open = 0
        gate = ev.spawn { ev.sleep(0.002) until connected == count }
        clients = Array.new(count) do |i|
          ev.spawn do
            io = connect.call
            connected += 1
            gate.wait
            max_open = [max_open, server.connections].max
            message = "client #{i} #{"x" * (i % 700)}\n"
            io.write(message)
            echoed = io.read_exactly(message.bytesize, timeout: 5)
            io.close
            echoed == message
          end
        end
        results = clients.map(&:wait)
        [results, max_open]
      end

      it "echoes every byte for 1,000 concurrent TCPClient connections in one process", timing: true do
        server = echo_server
        results, max_open = thousand_clients(server) do
          Evix::TCPClient.connect(ev, "127.0.0.1", server.port, timeout: 5)
        end
        expect(results.count(true)).to eq(1000)
        expect(max_open).to eq(1000)
        run_until(ev) { server.connections.zero? }
      end

      it "echoes every byte for 1,000 concurrent connections made with plain non-blocking connects", timing: true do
        server = echo_server
        address = Addrinfo.tcp("127.0.0.1", server.port)
        results, max_open = thousand_clients(server) do
          socket = track_io(Socket.new(:INET, :STREAM)).first
          io = ev.wrap(socket)
          if socket.connect_nonblock(address, exception: false) == :wait_writable
            io.wait_writable(timeout: 5)
            error = socket.getsockopt(:SOCKET, :ERROR).int
            raise SystemCallError.new("connect", error) unless error.zero?
          end
          io
        end
        expect(results.count(true)).to eq(1000)
        expect(max_open).to eq(1000)
        run_until(ev) { server.connections.zero? }
      end
    end

    describe "#close" do
      it "stops accepting while open connections go on, and is idempotent" do
        server = echo_server
        client = tcp_client(server.port)
        expect(round_trip(ev, client, "before\n")).to eq("before\n")
        port = server.port
        expect(server.close).to be_nil
        expect(server.close).to be_nil
        expect(server.closed?).to be(true)
        expect { TCPSocket.new("127.0.0.1", port) }.to raise_error(Errno::ECONNREFUSED)
        expect(round_trip(ev, client, "after\n")).to eq("after\n")
      end
    end

    describe "#shutdown" do
      let(:payload) { Random.new(9).bytes(1_500_000) }

      # Each connection gets the payload, then the handler reads until EOF.
      def sending_server
        server_on do |client|
          client.io.setsockopt(:SOCKET, :SNDBUF, 64 * 1024) # keep the 1.5 MB pending in the server, not the kernel
          client.write(payload)
          nil while client.read
        end
      end

      def slow_reader(socket)
        helper_thread do
          received = String.new(encoding: Encoding::BINARY)
          loop do
            received << socket.readpartial(16 * 1024)
            sleep 0.001
          rescue EOFError, Errno::ECONNRESET
            break
          end
          received
        end
      end

      it "lets a reading client get every byte and cuts a client that never reads at the deadline", timing: true do
        server = sending_server
        reading = tcp_client(server.port, rcvbuf: 8192)
        stuck = tcp_client(server.port, rcvbuf: 8192)
        run_until(ev) { server.connections == 2 }
        run_for(ev, 0.05) # both handlers are now blocked in write with most of the payload pending
        reader = slow_reader(reading)
        forced = nil
        took = elapsed { forced = server.shutdown(timeout: 1) }
        expect(forced).to eq(1)
        expect(took).to be >= 0.95
        expect(took).to be < 2
        received = reader.value
        expect(received.bytesize).to eq(payload.bytesize)
        expect(received == payload).to be(true)
        cut = String.new(encoding: Encoding::BINARY)
        run_until(ev) { eof?(stuck, cut) }
        expect(cut.bytesize).to be < payload.bytesize
        run_until(ev) { server.connections.zero? }
        expect(server.closed?).to be(true)
      end

      it "works from inside a task too", timing: true do
        server = sending_server
        stuck = tcp_client(server.port, rcvbuf: 8192)
        run_until(ev) { server.connections == 1 }
        run_for(ev, 0.05)
        took = elapsed { expect(ev.spawn { server.shutdown(timeout: 0.3) }.wait).to eq(1) }
        expect(took).to be_between(0.25, 1.5)
        run_until(ev) { eof?(stuck) }
      end

      it "returns 0 quickly when connections are only waiting to read, and their clients see EOF", timing: true do
        server = echo_server
        client = tcp_client(server.port)
        expect(round_trip(ev, client, "x")).to eq("x")
        forced = nil
        took = elapsed { forced = server.shutdown(timeout: 2) }
        expect(forced).to eq(0)
        expect(took).to be < 0.5
        run_until(ev) { eof?(client) }
        expect(server.connections).to eq(0)
      end

      # What arrived before the drain began is answered: a connection
      # accepted or still in the listen backlog whose request is in the
      # kernel's buffer gets its answer, then end of file; an idle one is
      # closed at once. (Client sockets here are blocking, read by #gets.)
      def answers_after_drain(clients)
        clients.map do |client|
          ready = client.wait_readable(3)
          ready ? client.read : :nothing
        rescue Errno::ECONNRESET, Errno::EPIPE => e
          e.class.name
        end
      end

      it "answers 20 accepted connections whose request had arrived but was not read yet", timing: true do
        server = echo_server
        clients = Array.new(20) { tcp_client(server.port) }
        run_until(ev) { server.connections == 20 }
        run_for(ev, 0.02) # every handler now waits in read
        clients.each_with_index { |client, i| client.write("request #{i}\n") }
        forced = server.shutdown(timeout: 2)
        expect(answers_after_drain(clients)).to eq(Array.new(20) { |i| "request #{i}\n" })
        expect(forced).to eq(0)
      end

      it "answers 20 connections still in the listen backlog whose request had arrived", timing: true do
        server = echo_server
        clients = Array.new(20) { |i| tcp_client(server.port).tap { |c| c.write("queued #{i}\n") } }
        forced = server.shutdown(timeout: 2) # the loop has not run: nothing was accepted yet
        expect(answers_after_drain(clients)).to eq(Array.new(20) { |i| "queued #{i}\n" })
        expect(forced).to eq(0)
      end

      it "closes an idle connection at once and answers a busy one beside it", timing: true do
        server = echo_server
        idle = tcp_client(server.port)
        talker = tcp_client(server.port)
        run_until(ev) { server.connections == 2 }
        talker.write("first\n")
        took = elapsed { server.shutdown(timeout: 3) }
        expect(took).to be < 1
        expect(answers_after_drain([idle, talker])).to eq(["", "first\n"])
      end

      it "raises ArgumentError showing a negative or NaN timeout, and still accepts" do
        server = echo_server
        [-1, Float::NAN].each do |bad|
          expect { server.shutdown(timeout: bad) }.to raise_error(ArgumentError, /timeout.*#{Regexp.escape(bad.to_s)}/)
        end
        expect(server.closed?).to be(false)
      end
    end

    describe "#shutdown from a signal block" do
      # USR1 terminates the process by default: while an example runs it is
      # ignored by a harmless Ruby handler, so a late signal cannot kill rspec.
      around do |example|
        saved = Signal.trap(:USR1, proc {})
        begin
          example.run
        ensure
          sleep 0.02
          Signal.trap(:USR1, saved || "DEFAULT")
        end
      end

      # An echo server whose handler, at EOF, takes +linger+ seconds to say
      # "bye"; USR1 runs `shutdown(timeout:); stop`, as README's TERM block does.
      def lingering_server(linger:, timeout:, outcome:)
        server = server_on do |client|
          while (data = client.read)
            client.write(data)
          end
          ev.sleep(linger)
          client.write("bye")
        end
        ev.add_signal(:USR1) do
          outcome[:forced] = server.shutdown(timeout: timeout)
          ev.stop
        end
        server
      end

      # What the client got, what shutdown returned, how long run took and the
      # connections left when it returned.
      def drain_on_usr1(linger:, timeout:)
        outcome = {}
        server = lingering_server(linger: linger, timeout: timeout, outcome: outcome)
        client = tcp_client(server.port)
        expect(round_trip(ev, client, "hi")).to eq("hi")
        safety = ev.add_timer(5) { ev.stop }
        helper_thread { Process.kill(:USR1, Process.pid) }
        outcome[:took] = elapsed { ev.run }
        safety.cancel
        outcome[:left] = server.connections
        outcome[:got] = String.new
        run_until(ev) { eof?(client, outcome[:got]) }
        outcome
      end

      it "waits for the handlers to finish, then stop ends run (README's pattern)", timing: true do
        result = drain_on_usr1(linger: 0.3, timeout: 3)
        expect(result).to match(got: "bye", forced: 0, took: be_between(0.28, 2), left: 0)
      end

      it "answers on SIGTERM the requests that arrived just before the drain began" do
        answers = in_child(timeout: 10) do
          child_loop = Evix::Loop.new
          server = Evix::TCPServer.new(child_loop, "127.0.0.1", 0) do |client|
            while (line = client.gets)
              client.write(line)
            end
          end
          clients = Array.new(20) { TCPSocket.new("127.0.0.1", server.port) }
          child_loop.add_signal(:TERM) do
            # The requests arrive now: in the kernel's buffers, not read.
            clients.each_with_index { |client, i| client.write("request #{i}\n") }
            server.shutdown(timeout: 2)
            child_loop.stop
          end
          child_loop.run_once(0.05) until server.connections == 20
          child_loop.run_once(0.02) # every handler now waits in gets
          Process.kill(:TERM, Process.pid)
          child_loop.run
          clients.map do |client|
            client.wait_readable(3) ? client.read : :nothing
          rescue SystemCallError => e
            e.class.name
          end
        end
        expect(answers).to eq(Array.new(20) { |i| "request #{i}\n" })
      end

      it "forces what is left at the deadline (the handler is cancelled), then stop ends run", timing: true do
        result = drain_on_usr1(linger: 10, timeout: 0.3)
        expect(result).to match(got: "", forced: 1, took: be_between(0.28, 2), left: 0)
      end

      # The README's shutdown pattern (its own example, run by spec/docs/readme_spec.rb, is
      # on a UNIX socket), on TCP, printing its port.
      def readme_server_code
        <<~'RUBY'
          $stdout.sync = true
          loop = Evix::Loop.new
          server = Evix::TCPServer.new(loop, "127.0.0.1", 0, idle_timeout: 60) do |client|
            while (data = client.read)
              client.write(data)
            end
          end
          loop.add_signal(:TERM) { server.shutdown(timeout: 5); loop.stop }
          puts "port #{server.port}"
          loop.run
          puts 'run returned'
        RUBY
      end

      # A TERM while a client is connected drains it and run returns.
      it "runs the README's shutdown pattern: the client sees EOF and run returns" do
        lib = File.expand_path("../../../lib", __dir__)
        command = [RbConfig.ruby, "-I", lib, "-revix", "-e", readme_server_code]
        Open3.popen3(*command, pgroup: true) do |input, out, err, thread|
          input.close
          Timeout.timeout(10) do
            client = TCPSocket.new("127.0.0.1", Integer(out.gets.to_s[/\d+/]))
            client.write("hello")
            expect(client.readpartial(5)).to eq("hello")
            Process.kill(:TERM, thread.pid)
            expect(client.read).to eq("")
            client.close
            expect(out.gets).to eq("run returned\n")
            expect(thread.value).to be_success
            expect(err.read).to eq("")
          end
        ensure
          Process.kill(:KILL, -thread.pid) if thread.join(0.1).nil?
        end
      end
    end

    describe "idle_timeout" do
      it "raises ArgumentError showing a negative, NaN or infinite value, and TypeError for a non-number" do
        [-1, -0.5, Float::NAN, Float::INFINITY].each do |bad|
          expect { described_class.new(ev, "127.0.0.1", 0, idle_timeout: bad) {} }
            .to raise_error(ArgumentError, /idle_timeout.*#{Regexp.escape(bad.to_s)}/)
        end
        expect { described_class.new(ev, "127.0.0.1", 0, idle_timeout: "5") {} }
          .to raise_error(TypeError, /idle_timeout/)
      end

      it "closes a connection with no input for that long, but not one that keeps talking", timing: true do
        # The timeout is 10 write periods, so a stall of the process can't
        # make the chatty connection look idle.
        server = echo_server(idle_timeout: 0.5)
        t0 = now
        quiet = tcp_client(server.port)
        chatty = tcp_client(server.port)
        echoed = String.new
        closed_at = nil
        ticker = ev.add_timer(0.05, repeat: 0.05) { chatty.write("x") }
        run_until(ev, timeout: 4) do
          drain(chatty, echoed)
          closed_at ||= now if eof?(quiet)
          closed_at && now - t0 > 1.2
        end
        ticker.cancel
        run_for(ev, 0.05)
        drain(chatty, echoed)
        expect(closed_at - t0).to be_between(0.48, 1.2)
        expect(echoed).to match(/\Ax{8,}\z/)
        expect(round_trip(ev, chatty, "still open")).to eq("still open")
        expect(server.connections).to eq(1)
      end
    end

    describe "errors in handlers" do
      # Echoes lines; a line starting with "bad" makes the handler raise.
      def failing_server
        handled = []
        server = server_on do |client|
          handled << client
          while (line = client.gets)
            raise EvixSpecError, "bad line from client" if line.start_with?("bad")

            client.write(line)
          end
        end
        [server, handled]
      end

      it "passes the exception and the client to on_error, closes that connection only" do
        server, handled = failing_server
        errors = []
        expect(server.on_error { |error, client| errors << [error, client, client.closed?] }).to equal(server)
        good = tcp_client(server.port)
        bad = tcp_client(server.port)
        expect(round_trip(ev, good, "one\n")).to eq("one\n")
        bad.write("bad\n")
        run_until(ev) { errors.size == 1 }
        error, client, closed = errors.first
        expect(error).to be_a(EvixSpecError)
        expect(error.message).to eq("bad line from client")
        expect(client).to be_a(Evix::IO)
        expect(handled).to include(client)
        expect(closed).to be(false)
        run_until(ev) { eof?(bad) }
        expect(round_trip(ev, good, "two\n")).to eq("two\n")
        newcomer = tcp_client(server.port)
        expect(round_trip(ev, newcomer, "three\n")).to eq("three\n")
      end

      it "writes the exception and its first frames (evix's folded) to $stderr by default" do
        server, = failing_server
        captured = StringIO.new
        original = $stderr
        begin
          $stderr = captured
          bad = tcp_client(server.port)
          bad.write("bad\n")
          run_until(ev) { eof?(bad) }
          run_for(ev, 0.02)
        ensure
          $stderr = original
        end
        lines = captured.string.lines
        expect(lines.size).to be_between(2, Evix::Backtrace::REPORT_FRAMES + 2), captured.string
        expect(lines.first).to include("EvixSpecError").and include("bad line from client")
        raise_line = File.readlines(__FILE__).index { |text| text.include?('"bad line from client" if') } + 1
        expect(lines[1]).to start_with("\tfrom #{__FILE__}:#{raise_line}:")
        expect(lines.drop(1)).to all(start_with("\t"))
      end

      it "gives a peer's reset to on_error, and the default handler leaves it out of $stderr" do
        reset_server = lambda do
          server_on do |client|
            client.write("hello\n")
            nil while client.read
          end
        end
        errors = []
        explicit = reset_server.call
        explicit.on_error { |error, _client| errors << error }
        quiet = reset_server.call
        captured = StringIO.new
        original = $stderr
        begin
          $stderr = captured
          [explicit, quiet].each do |server|
            client = tcp_client(server.port)
            run_until(ev) { client.wait_readable(0) }
            abortive(client).close
          end
          run_until(ev) { errors.size == 1 && quiet.connections.zero? }
          run_for(ev, 0.02)
        ensure
          $stderr = original
        end
        expect(errors.map(&:class)).to eq([Errno::ECONNRESET])
        expect(captured.string).to eq("")
      end

      it "raises ArgumentError from on_error without a block" do
        expect { echo_server.on_error }.to raise_error(ArgumentError, /block/)
      end
    end

    describe "connections closed under a handler's feet (the classic bug)" do
      it "does not touch a connection that another handler closed while both had events in one iteration" do
        conns = {}
        events = []
        errors = []
        victims = { "a" => "b", "b" => "a" }
        server = server_on do |client|
          name = client.gets.chomp
          conns[name] = client
          while (line = client.gets)
            events << [name, line.chomp, client.closed?]
            victim = conns[victims[name]]
            victim&.close
            client.write("ok\n")
          end
          events << [name, :eof]
        rescue Evix::ClosedError
          events << [name, :closed]
          raise
        end
        server.on_error { |error, _client| errors << error }
        a = tcp_client(server.port)
        b = tcp_client(server.port)
        a.write("a\n")
        b.write("b\n")
        run_until(ev) { conns.size == 2 }
        run_for(ev, 0.02) # both handlers now wait in gets
        a.write("go\n")
        b.write("go\n")
        sleep 0.05 # both sockets readable before the next poll
        expect { ev.run_once(1) }.not_to raise_error
        run_for(ev, 0.05)
        # Whoever read first closed the other; the closed one got no data.
        expect(events.count { |event| event[1] == "go" }).to eq(1)
        survivor, = events.find { |event| event[1] == "go" }
        victim = victims[survivor]
        expect(events).to contain_exactly([survivor, "go", false], [victim, :closed])
        expect(errors).to eq([])
        sockets = { "a" => a, "b" => b }
        run_until(ev) { eof?(sockets[victim]) }
        expect(round_trip(ev, sockets[survivor], "again\n")).to eq("ok\nok\n")
        expect(server.connections).to eq(1)
      end

      it "never reads or writes a connection after its idle timer closed it while input kept arriving" do
        log = []
        errors = []
        server = server_on(idle_timeout: 0.1) do |client|
          while (line = client.gets)
            log << [:line, line.chomp, client.closed?]
            client.write("ack #{line}")
            ev.sleep(0.25) if line.start_with?("l1") # busy: the idle timer fires meanwhile
          end
        rescue Exception => e # rubocop:disable Lint/RescueException -- recorded, then re-raised
          log << [:raised, e.class]
          raise
        end
        server.on_error { |error, _client| errors << error }
        client = tcp_client(server.port)
        client.write("l1\nl2\n") # l2 waits in the connection's buffer while l1 is handled
        writer = ev.add_timer(0.02, repeat: 0.02) do
          client.write("more\n")
        rescue SystemCallError
          nil
        end
        expect { run_until(ev) { server.connections.zero? && log.any? } }.not_to raise_error
        writer.cancel
        expect(errors).to eq([])
        expect(log.first).to eq([:line, "l1", false])
        expect(log.select { |entry| entry.last == true }).to eq([]), log.inspect
        expect(log.last).to eq([:raised, Evix::ClosedError])
        expect(receive_bytes(ev, client, 100)).to eq("ack l1\n") # then end of file
        log.clear
        other = tcp_client(server.port) # the server goes on
        expect(round_trip(ev, other, "hi\n")).to eq("ack hi\n")
        expect(log).to eq([[:line, "hi", false]])
      end

      it "keeps a connection whose idle deadline passes while its input is already waiting" do
        closed_under = []
        server = server_on(idle_timeout: 0.1) do |client|
          while (line = client.gets)
            closed_under << line if client.closed?
            client.write(line)
          end
        end
        client = tcp_client(server.port)
        expect(round_trip(ev, client, "first\n")).to eq("first\n")
        ev.next_tick { sleep 0.2 } # the loop is stuck: the idle deadline passes...
        helper_thread do
          sleep 0.05
          client.write("second\n") # ...while input arrives
        end
        got = String.new
        expect { run_until(ev) { drain(client, got) == :eof || got.include?("second") } }.not_to raise_error
        expect(closed_under).to eq([])
        expect(got).to eq("second\n").or eq("")
      end
    end

    describe "out of descriptors (EMFILE on accept)" do
      it "backs off without spinning and serves again once descriptors are free", timing: true do
        control_r, control_w = pipe
        pid, reports = fork_child do |report|
          control_w.close
          $stderr = StringIO.new
          child_loop = Evix::Loop.new
          served = false
          server = described_class.new(child_loop, "127.0.0.1", 0) do |client|
            client.write(client.gets)
            served = true
            child_loop.stop
          end
          highest = Dir.children("/proc/self/fd").map(&:to_i).max
          Process.setrlimit(:NOFILE, highest + 8, Process.getrlimit(:NOFILE)[1])
          spares = []
          begin
            loop { spares << File.open(File::NULL) }
          rescue Errno::EMFILE
            nil
          end
          report.call("port #{server.port}")
          control_r.read(1) # the parent has connected
          cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
          child_loop.add_timer(0.5) { child_loop.stop }
          child_loop.run
          cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu0
          report.call("cpu #{cpu} accepted #{server.connections} served #{served}")
          spares.each(&:close)
          deadline = child_loop.add_timer(3) { child_loop.stop }
          child_loop.run
          deadline.cancel
          report.call("served #{served} warned #{$stderr.string.include?("accept")}")
        end
        control_r.close
        port_line = child_line(reports)
        expect(port_line).to start_with("port ")
        client = tcp_client(Integer(port_line.split.last))
        client.write("ping\n")
        control_w.write("x")
        measured = child_line(reports)
        expect(client.wait_readable(5)).to be_truthy
        echoed = client.gets
        final = child_line(reports)
        expect(wait_child(pid).exitstatus).to eq(0), [measured, final].inspect
        cpu = measured[/cpu ([\d.e-]+)/, 1].to_f
        expect(measured).to include("accepted 0 served false")
        expect(cpu).to be < 0.2
        expect(echoed).to eq("ping\n")
        expect(final).to include("served true")
      end
    end
  end
end
