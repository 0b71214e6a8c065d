# frozen_string_literal: true

require "spec_helper"
require "digest"
require_relative "support/reliability_helpers"

RSpec.describe "Reliability: peers that misbehave" do
  let(:ev) { new_loop }
  let(:errors) { [] }

  def server_on(**options, &)
    server = Evix::TCPServer.new(ev, "127.0.0.1", 0, **options, &)
    server.on_error { |error, _client| errors << error }
    track_server(server)
  end

  describe "a client that connects and never sends" do
    it "is closed by idle_timeout, without an error report, and the server goes on", timing: true do
      server = server_on(idle_timeout: 0.2) do |client|
        while (line = client.gets)
          client.write(line)
        end
      end
      silent = tcp_client(server.port)
      got = String.new
      took = elapsed { run_until(ev, timeout: 3) { drain(silent, got) == :eof } }
      expect(took).to be_between(0.15, 1.5)
      expect(got).to eq("")
      run_until(ev) { server.connections.zero? }
      expect(errors).to eq([])
      talker = tcp_client(server.port)
      talker.write("still here\n")
      reply = String.new
      run_until(ev) { drain(talker, reply) == :eof || reply.end_with?("\n") }
      expect(reply).to eq("still here\n")
    end
  end

  describe "a client that never reads while the server writes 10 MB" do
    let(:ten_mb) { 10 * 1024 * 1024 }
    let(:chunk_size) { 64 * 1024 }

    # The handler offers 10 MB in 64 KiB chunks of one preallocated string.
    def writing_server(timeout: nil)
      progress = { sent: 0, done: false }
      chunk = ("z" * chunk_size).freeze
      chunks = ten_mb / chunk_size
      server = server_on do |client|
        client.timeout = timeout
        client.io.setsockopt(:SOCKET, :SNDBUF, 64 * 1024)
        chunks.times do
          client.write(chunk)
          progress[:sent] += chunk.bytesize
        end
      ensure
        progress[:done] = true
      end
      [server, progress]
    end

    it "is cut at the Evix::IO write timeout, with bounded memory", timing: true do
      GC.start
      rss0 = rss_kib
      server, progress = writing_server(timeout: 0.3)
      stuck = tcp_client(server.port, rcvbuf: 16 * 1024)
      took = elapsed { run_until(ev, timeout: 5) { progress[:done] } }
      expect(took).to be_between(0.25, 2)
      expect(errors.map(&:class)).to eq([Evix::TimeoutError])
      expect(progress[:sent]).to be < 4 * 1024 * 1024 # what the kernel buffers took, not 10 MB
      run_until(ev) { server.connections.zero? }
      expect(rss_kib - rss0).to be < 24 * 1024
      received = String.new
      run_until(ev) { drain(stuck, received) == :eof }
      expect(received.bytesize).to be <= progress[:sent]
      expect(received.delete("z")).to eq("")
    end

    it "is cut at shutdown's deadline when there is no write timeout", timing: true do
      server, progress = writing_server(timeout: nil)
      tcp_client(server.port, rcvbuf: 16 * 1024)
      run_until(ev) { server.connections == 1 }
      run_for(ev, 0.1) # the handler is now blocked in write
      sent_before = progress[:sent]
      forced = nil
      took = elapsed { forced = server.shutdown(timeout: 0.3) }
      expect(forced).to eq(1)
      expect(took).to be_between(0.25, 1.5)
      run_until(ev) { progress[:done] && server.connections.zero? }
      expect(progress[:sent]).to be < 4 * 1024 * 1024
      expect(progress[:sent]).to eq(sent_before) # no progress while the peer reads nothing
      expect(ev.stats).to include(watchers: 0, timers: 0)
    end
  end

  describe "a client that resets the connection (RST) while the server writes" do
    it "ends only that connection with EPIPE/ECONNRESET; others go on; SIGPIPE does not kill the server" do
      pid, reports = fork_child do |report|
        child_loop = Evix::Loop.new
        failures = []
        chunk = "r" * 65_536
        server = Evix::TCPServer.new(child_loop, "127.0.0.1", 0) do |client|
          case client.gets
          when "stream\n"
            loop { client.write(chunk) }
          when "echo\n"
            while (line = client.gets)
              client.write(line)
            end
          end
        end
        server.on_error { |error, _client| failures << error.class.name }
        child_loop.add_signal(:TERM) do
          report.call("stats failures=#{failures.join(",")} open=#{server.connections}")
          server.close
          child_loop.stop
        end
        report.call("port #{server.port}")
        child_loop.run
        child_loop.close
      end
      port = Integer(child_line(reports)[/\d+/])
      survivor = tcp_client(port)
      survivor.write("echo\nbefore\n")
      expect(survivor.gets).to eq("before\n")
      3.times do
        victim = tcp_client(port)
        victim.write("stream\n")
        expect(victim.readpartial(65_536).bytesize).to be > 0
        sleep 0.02
        abortive(victim).close
      end
      sleep 0.1
      survivor.write("after\n")
      expect(survivor.wait_readable(2)).to be_truthy
      expect(survivor.gets).to eq("after\n")
      fresh = tcp_client(port)
      fresh.write("echo\nfresh\n")
      expect(fresh.wait_readable(2)).to be_truthy
      expect(fresh.gets).to eq("fresh\n")
      fresh.close_write
      expect(fresh.read).to eq("") # the server saw the end and closed its side
      fresh.close
      Process.kill(:TERM, pid)
      stats = child_line(reports)
      failures = stats[/failures=(\S*)/, 1].split(",")
      expect(failures.size).to eq(3)
      expect(failures).to all(satisfy { |name| %w[Errno::EPIPE Errno::ECONNRESET].include?(name) })
      expect(stats).to include("open=1") # the survivor
      status = wait_child(pid)
      expect(status.signaled?).to be(false), status.inspect
      expect(status.exitstatus).to eq(0)
    end
  end

  describe "half-close: the client shuts down its write side" do
    it "gets everything the server sends after reading to end of file, then EOF" do
      server = server_on do |client|
        data = String.new(encoding: Encoding::BINARY)
        while (chunk = client.read)
          data << chunk
        end
        client.write("#{Digest::SHA256.hexdigest(data)} #{data.bytesize}\n")
        client.write(data.reverse)
      end
      payload = Random.new(7).bytes(300_000)
      client = tcp_client(server.port, rcvbuf: 32 * 1024)
      reader = helper_thread do
        client.write(payload)
        client.shutdown(:WR)
        client.read # until EOF
      end
      run_until(ev, timeout: 5) { !reader.alive? }
      reply = reader.value.b
      header, body = reply.split("\n", 2)
      expect(header).to eq("#{Digest::SHA256.hexdigest(payload)} #{payload.bytesize}")
      expect(body.bytesize).to eq(payload.bytesize)
      expect(body == payload.reverse).to be(true)
      expect(errors).to eq([])
    end

    it "echoes 2 MB, still flowing after the client's FIN, every byte before the server's FIN" do
      server = server_on do |client|
        while (chunk = client.read)
          client.write(chunk)
        end
      end
      payload = Random.new(8).bytes(2 * 1024 * 1024)
      client = tcp_client(server.port)
      writer = helper_thread do
        client.write(payload)
        client.shutdown(:WR)
      end
      received = String.new(encoding: Encoding::BINARY)
      run_until(ev, timeout: 8) { drain(client, received) == :eof }
      writer.join
      expect(received.bytesize).to eq(payload.bytesize)
      expect(Digest::SHA256.hexdigest(received)).to eq(Digest::SHA256.hexdigest(payload))
      expect(errors).to eq([])
    end
  end

  describe "1 MB of input with no newline to gets with a limit" do
    [[4096], ["\n", 4096], [1000]].each do |args|
      it "returns limit-sized chunks (gets(#{args.map(&:inspect).join(", ")})) and holds little", timing: true do
        limit = args.last
        sizes = []
        max_held = 0
        first_at = nil
        server = server_on do |client|
          while (line = client.gets(*args))
            first_at ||= now
            sizes << line.bytesize
            held = client.instance_variable_get(:@buffer)&.bytesize.to_i
            max_held = held if held > max_held
          end
        end
        client = tcp_client(server.port)
        finished_at = nil
        sender = helper_thread do
          piece = "a" * 65_536
          16.times do
            client.write(piece)
            sleep 0.005
          end
          finished_at = now
          client.shutdown(:WR)
        end
        # Under GC.stress every one of the ~1,000 gets collects the heap.
        run_until(ev, timeout: scaled(5, 60)) { !sender.alive? && server.connections.zero? }
        expect(sizes.sum).to eq(1024 * 1024)
        expect(sizes[0...-1]).to all(eq(limit))
        expect(sizes.last).to be <= limit
        expect(first_at).to be < finished_at # a line came before the input ended: nothing waited for a newline
        expect(max_held).to be <= limit + Evix::IO::CHUNK
        expect(errors).to eq([])
      end
    end
  end
end
