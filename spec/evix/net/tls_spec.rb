# frozen_string_literal: true

require "spec_helper"
require "digest"
require "net/http"
require "openssl"
require "open3"

# TLS over loopback with certificates the specs make (spec/support/tls_certs.rb).
# Every example that serves runs inside Evix.run in a forked child with a
# deadline: a handshake that hangs fails the example instead of the suite.
RSpec.describe "TLS: Evix::TCPServer and Evix::TCPClient with ssl_context:" do
  let(:certs) { EvixTLSCerts }

  # Runs the block inside Evix.run on +backend+'s loop in a forked child and
  # returns its value; the child's exception fails the example.
  def in_tls_run(backend, timeout: 8, &block)
    outcome = evix_run_in_child(backend, timeout: timeout) { [:ok, block.call(Fiber.scheduler.loop)] }
    raise "the child raised #{outcome[1]}: #{outcome[2]}" if outcome.first == :error

    outcome.last
  end

  # A TLS echo server whose on_error records [class name, message] in +errors+.
  def tls_echo_server(evloop, errors, **options)
    server = Evix::TCPServer.new(evloop, "127.0.0.1", 0, ssl_context: certs.server_context, **options) do |client|
      while (data = client.read)
        client.write(data)
      end
    end
    server.on_error { |error, _client| errors << [error.class.name, error.message] }
  end

  def tls_connect(evloop, port, context: certs.client_context, **options)
    Evix::TCPClient.connect(evloop, "127.0.0.1", port, ssl_context: context, **options)
  end

  # [class name, message] of what the block raised, or [:value, value].
  def outcome_of
    [:value, yield]
  rescue StandardError => e
    [e.class.name, e.message]
  end

  Evix.backends.each do |backend|
    context "on #{backend}" do
      it "echoes lines, exact reads and 1 MiB both ways at once, verified, and both sides see a clean end" do
        result = in_tls_run(backend) do |ev|
          errors = []
          ended = []
          server = Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: certs.server_context) do |client|
            client.write(client.gets) # a line
            client.write(client.read_exactly(5).upcase)
            size = Integer(client.gets)
            received = +""
            # Reads and echoes at once: both directions' buffers fill up.
            while received.bytesize < size
              chunk = client.read([65_536, size - received.bytesize].min)
              received << chunk
              client.write(chunk)
            end
            client.write("#{Digest::SHA256.hexdigest(received)}\n")
            ended << client.read # the client's close_notify: nil, no error
          end
          server.on_error { |error, _client| errors << [error.class.name, error.message] }
          client = tls_connect(ev, server.port, hostname: "localhost")
          client.write("hello tls\n")
          line = client.gets
          client.write("abcde")
          upper = client.read_exactly(5)
          payload = Random.new(7).bytes(1024 * 1024)
          client.write("#{payload.bytesize}\n")
          writer = Fiber.schedule { client.write(payload) }
          echoed = client.read_exactly(payload.bytesize)
          digest = client.gets.chomp
          client.close
          ev.sleep(0.01) until ended.size == 1 && !writer.alive?
          server.shutdown(timeout: 1)
          { line: line, upper: upper, same: echoed == payload, digest: digest,
            expected: Digest::SHA256.hexdigest(payload), ended: ended, errors: errors,
            version: client.ssl_socket.ssl_version }
        end
        expect(result).to include(line: "hello tls\n", upper: "ABCDE", same: true, ended: [nil], errors: [])
        expect(result[:digest]).to eq(result[:expected])
        expect(result[:version]).to eq("TLSv1.3")
      end

      it "sends close_notify when the server's handler ends: the client's end of file is a clean one" do
        result = in_tls_run(backend) do |ev|
          server = Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: certs.server_context) do |client|
            client.write("bye\n")
          end
          client = tls_connect(ev, server.port)
          line = client.gets
          # OpenSSL's own read: EOFError after close_notify, an SSLError
          # ("unexpected eof") had the server just closed its socket.
          ending = outcome_of { client.ssl_socket.sysread(100) }
          client.close
          server.shutdown(timeout: 1)
          [line, ending]
        end
        expect(result).to eq(["bye\n", ["EOFError", "end of file reached"]])
      end

      # Only close_notify tells the end of the data from a TCP close an
      # attacker (or a crash) made: without it a cut body would look whole.
      # A server context with OP_IGNORE_UNEXPECTED_EOF asks for the lax
      # reading, end of file.
      [[0, ["OpenSSL::SSL::SSLError", /unexpected eof/]],
       [OpenSSL::SSL::OP_IGNORE_UNEXPECTED_EOF, nil]].each do |option, expected|
        it "takes a peer that closes its socket without close_notify as #{expected ? "an error" : "end of file"} " \
           "with options #{option}" do
          result = in_tls_run(backend) do |ev|
            ended = []
            context = certs.server_context
            context.options |= option
            server = Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: context) do |client|
              client.write("ok #{client.gets}")
              ended << client.read
            end
            server.on_error { |error, _client| ended << [error.class.name, error.message] }
            tcp = TCPSocket.new("127.0.0.1", server.port)
            ssl = OpenSSL::SSL::SSLSocket.new(tcp, certs.client_context)
            ssl.connect
            ssl.write("x\n")
            answer = ssl.gets # reads the session tickets too: nothing is left unread
            tcp.close # no close_notify
            ev.sleep(0.01) until ended.size == 1
            server.shutdown(timeout: 1)
            [answer, ended]
          end
          expect(result).to match(["ok x\n", [expected]])
        end
      end

      it "raises Errno::ECONNRESET to a reader whose TLS 1.3 peer closed with session tickets unread (a reset)" do
        result = in_tls_run(backend) do |ev|
          got = +""
          errors = []
          server = Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: certs.server_context) do |client|
            while (data = client.read) do got << data end
            errors << :end_of_file
          end
          server.on_error { |error, _client| errors << error.class.name }
          tcp = TCPSocket.new("127.0.0.1", server.port)
          ssl = OpenSSL::SSL::SSLSocket.new(tcp, certs.client_context)
          ssl.connect
          ssl.write("upload, cut short")
          ev.sleep(0.05) # the server's session tickets arrive and stay unread
          tcp.close # unread input: the kernel resets the connection
          ev.sleep(0.01) until errors.size == 1
          server.shutdown(timeout: 1)
          [ssl.ssl_version, got, errors]
        end
        expect(result).to eq(["TLSv1.3", "upload, cut short", ["Errno::ECONNRESET"]])
      end

      it "connects by name and by address: the certificate names localhost and 127.0.0.1" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, errors = [])
          got = [
            Evix::TCPClient.connect(ev, "localhost", server.port, ssl_context: certs.client_context),
            tls_connect(ev, server.port)
          ].map do |client|
            client.write("x\n")
            client.gets.tap { client.close }
          end
          server.shutdown(timeout: 1)
          [got, errors]
        end
        expect(result).to eq([%W[x\n x\n], []])
      end

      it "raises OpenSSL::SSL::SSLError at connect for a CA it does not trust; the server reports it and serves on" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, errors = [])
          stranger = certs.client_context(certs.pki.other_ca_cert)
          untrusted = outcome_of { tls_connect(ev, server.port, context: stranger) }
          trusted = tls_connect(ev, server.port)
          trusted.write("still here\n")
          echo = trusted.gets
          trusted.close
          ev.sleep(0.01) until errors.any?
          server.shutdown(timeout: 1)
          [untrusted, echo, errors]
        end
        untrusted, echo, errors = result
        expect(untrusted).to match(["OpenSSL::SSL::SSLError", /certificate verify failed/])
        expect(echo).to eq("still here\n")
        expect(errors).to match([["OpenSSL::SSL::SSLError", /alert unknown ca|unknown ca/]])
      end

      it "verifies by default with a new SSLContext (the system's CAs do not know ours), and not with verify: false" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, [])
          fresh = OpenSSL::SSL::SSLContext.new
          refused = outcome_of { tls_connect(ev, server.port, context: fresh) }
          mode = fresh.verify_mode
          unchecked = tls_connect(ev, server.port, context: OpenSSL::SSL::SSLContext.new, verify: false)
          unchecked.write("ok\n")
          echo = unchecked.gets
          unchecked.close
          server.shutdown(timeout: 1)
          [refused, mode, echo]
        end
        refused, mode, echo = result
        expect(refused).to match(["OpenSSL::SSL::SSLError", /certificate verify failed/])
        expect(mode).to eq(OpenSSL::SSL::VERIFY_PEER)
        expect(echo).to eq("ok\n")
      end

      it "raises OpenSSL::SSL::SSLError when the certificate does not name the host, and closes the socket" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, [])
          before = Dir.children("/proc/self/fd").size
          wrong = outcome_of { tls_connect(ev, server.port, hostname: "example.com") }
          ev.sleep(0.01) until server.connections.zero?
          after = Dir.children("/proc/self/fd").size
          server.shutdown(timeout: 1)
          [wrong, after - before]
        end
        expect(result).to match([["OpenSSL::SSL::SSLError", /hostname "example.com" does not match/], 0])
      end

      it "drops a client that never sends a ClientHello after handshake_timeout, serving others meanwhile" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, errors = [], handshake_timeout: 0.3)
          silent = Evix::TCPClient.connect(ev, "127.0.0.1", server.port)
          ev.sleep(0.01) until server.connections == 1
          other = tls_connect(ev, server.port)
          other.write("served\n")
          served = [other.gets, silent.closed?, errors.dup]
          other.close
          silent_end = silent.read(100, timeout: 5) # the server closed it: end of file
          server.shutdown(timeout: 1)
          [served, silent_end, errors]
        end
        served, silent_end, errors = result
        expect(served).to eq(["served\n", false, []])
        expect(silent_end).to be_nil
        expect(errors).to eq([["Evix::TimeoutError", "TLS handshake timed out after 0.3s"]])
      end

      it "reports a client that sends plain HTTP instead of a ClientHello, closes it, and serves on" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, errors = [])
          garbage = Evix::TCPClient.connect(ev, "127.0.0.1", server.port)
          garbage.write("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
          answer = +""
          begin
            while (chunk = garbage.read(4096, timeout: 5))
              answer << chunk
            end
          rescue Errno::ECONNRESET
            nil # the server closed with the rest of the request unread
          end
          other = tls_connect(ev, server.port)
          other.write("fine\n")
          echo = other.gets
          other.close
          ev.sleep(0.01) until server.connections.zero?
          server.shutdown(timeout: 1)
          [answer.bytesize < 100, echo, errors]
        end
        small_alert, echo, errors = result
        expect(small_alert).to be(true)
        expect(echo).to eq("fine\n")
        expect(errors).to match([["OpenSSL::SSL::SSLError", /http request|wrong version number|packet length/]])
      end

      it "drains on shutdown: a TLS reader gets end of file cleanly, a half-made handshake is dropped, none forced" do
        result = in_tls_run(backend) do |ev|
          server = tls_echo_server(ev, errors = [])
          reader = tls_connect(ev, server.port)
          reader.write("before\n")
          before = reader.gets
          half = Evix::TCPClient.connect(ev, "127.0.0.1", server.port) # never says hello
          ev.sleep(0.01) until server.connections == 2
          forced = server.shutdown(timeout: 3)
          [before, reader.read, half.read(10, timeout: 2), forced, server.connections, errors]
        end
        expect(result).to eq(["before\n", nil, nil, 0, 0, []])
      end

      it "echoes to openssl s_client (a real client) and ends its session with close_notify" do
        result = certs.with_pem_files do |dir|
          in_tls_run(backend, timeout: 8) do |ev|
            server = tls_echo_server(ev, errors = [])
            command = ["openssl", "s_client", "-connect", "127.0.0.1:#{server.port}", "-quiet",
                       "-CAfile", File.join(dir, "ca.pem"), "-verify_return_error", "-servername", "localhost"]
            stdin, stdout, stderr, process = Open3.popen3(*command)
            stdin.write("hello from s_client\n")
            stdin.close # -quiet implies -ign_eof: s_client reads on until the server ends the session
            echo = stdout.gets
            forced = server.shutdown(timeout: 3) # close_notify: s_client exits by itself
            rest = stdout.read
            [echo, rest, process.value.exitstatus, stderr.read, forced, errors]
          end
        end
        echo, rest, status, stderr, forced, errors = result
        expect(echo).to eq("hello from s_client\n")
        expect(rest).to eq("")
        expect(status).to eq(0), stderr
        expect(stderr).to include("verify return:1")
        expect([forced, errors]).to eq([0, []])
      end

      it "answers curl (a real client) over https with the body, verified against our CA" do
        result = certs.with_pem_files do |dir|
          in_tls_run(backend, timeout: 8) do |ev|
            errors = []
            server = Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: certs.server_context) do |client|
              request = client.gets
              nil while client.gets("\r\n") != "\r\n" # the headers
              body = "hello #{request.split[1]} over TLS\n"
              client.write("HTTP/1.1 200 OK\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
            end
            server.on_error { |error, _client| errors << [error.class.name, error.message] }
            url = "https://localhost:#{server.port}/evix"
            resolve = "localhost:#{server.port}:127.0.0.1"
            ca_file = File.join(dir, "ca.pem")
            verified = Open3.capture3("curl", "-sS", "-v", "--cacert", ca_file, "--resolve", resolve, url)
            unverified = Open3.capture3("curl", "-sS", "--resolve", resolve, url)
            ev.sleep(0.01) until server.connections.zero? && errors.size == 1
            server.shutdown(timeout: 1)
            [verified[0], verified[1], verified[2].exitstatus, unverified[2].exitstatus, errors]
          end
        end
        body, verbose, status, unverified_status, errors = result
        expect(body).to eq("hello /evix over TLS\n")
        expect(status).to eq(0), verbose
        expect(verbose).to match(/SSL connection using TLSv1\.3/)
        expect(unverified_status).to eq(60) # curl: the peer's certificate cannot be verified with its CAs
        # curl's rejection reaches the server as its "unknown ca" alert; with
        # sid's OpenSSL (the Ruby 3.4 lane) the server's read meets it while
        # retrying the session tickets it was writing, and says that instead,
        # or meets first the reset curl's close makes with those tickets
        # unread.
        expect(errors).to match([["OpenSSL::SSL::SSLError", /unknown ca|tls_retry_write_records failure/]])
          .or match([["Errno::ECONNRESET", /reset/]])
      end

      it "runs Evix::IO over an SSLSocket made by hand: plaintext OpenSSL holds is read without waiting" do
        result = in_tls_run(backend) do |ev|
          a, b = UNIXSocket.pair
          server = Evix::IO.new(ev, OpenSSL::SSL::SSLSocket.new(a, certs.server_context))
          client_ssl = OpenSSL::SSL::SSLSocket.new(b, certs.client_context)
          client_ssl.hostname = "localhost"
          client = Evix::IO.new(ev, client_ssl)
          accepting = Fiber.schedule { server.accept_tls(timeout: 5) }
          client.connect_tls(timeout: 5)
          ev.sleep(0.001) while accepting.alive?
          client.write("0123456789abcdefghijklmnopqrstuvwxyz") # one record
          # One byte at a time: after the first read the rest is inside OpenSSL,
          # the socket has nothing, and a wait on the socket would never end.
          first = server.read(1, timeout: 2)
          held = [server.ssl_socket.pending, server.wait_readable(timeout: 0)]
          bytes = first + Array.new(35) { server.read(1, timeout: 2) }.join
          client.close
          [bytes, held, server.read(1, timeout: 2)]
        ensure
          server&.close
        end
        expect(result).to eq(["0123456789abcdefghijklmnopqrstuvwxyz", [35, true], nil])
      end
    end
  end

  describe "writers of one TLS connection" do
    # A connected pair of TLS Evix::IOs over a UNIX socket pair (client,
    # server) with small kernel buffers: writes soon have to wait.
    def tls_pair(evloop)
      a, b = UNIXSocket.pair
      a.setsockopt(:SOCKET, :RCVBUF, 4096)
      b.setsockopt(:SOCKET, :SNDBUF, 4096)
      server = Evix::IO.new(evloop, OpenSSL::SSL::SSLSocket.new(a, certs.server_context))
      client = Evix::IO.new(evloop, OpenSSL::SSL::SSLSocket.new(b, certs.client_context))
      accepting = Fiber.schedule { server.accept_tls(timeout: 5) }
      client.connect_tls(timeout: 5)
      evloop.sleep(0.001) while accepting.alive?
      [client, server]
    end

    Evix.backends.each do |backend|
      it "take turns on #{backend}: three fibers' writes each arrive whole, none lost or doubled" do
        result = in_tls_run(backend) do |ev|
          client, server = tls_pair(ev)
          size = 64 * 1024
          writers = %w[a b c].map { |letter| Fiber.schedule { client.write(letter * size) } }
          received = +""
          received << server.read(1000, timeout: 5) while received.bytesize < 3 * size # a slow reader
          ev.sleep(0.001) while writers.any?(&:alive?)
          client.close
          server.close
          received.scan(/a+|b+|c+/).map { |run| [run[0], run.size] } # the runs of one byte
        end
        expect(result.map(&:last)).to eq([65_536] * 3)
        expect(result.map(&:first).sort).to eq(%w[a b c])
      end

      it "refuses try_write on #{backend} (a queue OpenSSL cannot see) and leaves the connection whole" do
        result = in_tls_run(backend) do |ev|
          client, server = tls_pair(ev)
          refused = outcome_of { client.try_write("lost?") }
          client.write("kept\n")
          line = server.gets(timeout: 5)
          client.close
          server.close
          [refused, line]
        end
        expect(result).to match([["Evix::Error", /not available over TLS/], "kept\n"])
      end

      it "closes the connection on #{backend} when a write that OpenSSL must be handed again times out" do
        result = in_tls_run(backend) do |ev|
          client, server = tls_pair(ev)
          timed_out = outcome_of { client.write("x" * (4 * 1024 * 1024), timeout: 0.05) } # nobody reads
          closed = client.closed?
          server.close
          [timed_out, closed]
        end
        expect(result).to match([["Evix::TimeoutError", /timed out/], true])
      end
    end
  end

  describe "bad arguments" do
    let(:ev) { new_loop }

    it "wraps an SSLSocket in an Evix::TLS::Stream, and refuses a subclass of Evix::IO that is not one" do
      a, b = UNIXSocket.pair
      ssl = OpenSSL::SSL::SSLSocket.new(a)
      expect(ev.wrap(ssl)).to be_a(Evix::TLS::Stream)
      plain = Class.new(Evix::IO)
      expect { plain.new(ev, ssl) }
        .to raise_error(TypeError, /SSLSocket is wrapped by Evix::IO.new or a subclass of Evix::TLS::Stream/)
      expect(Class.new(Evix::TLS::Stream).new(ev, ssl)).to be_a(Evix::TLS::Stream)
    ensure
      [a, b].each { |s| s&.close }
    end

    it "raises TypeError for a server ssl_context that is not an SSLContext, and opens no socket" do
      expect(ev.closed?).to be(false) # the loop's own descriptors are open before counting
      before = fd_count
      expect { Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: "cert.pem") {} }
        .to raise_error(TypeError, /ssl_context must be an OpenSSL::SSL::SSLContext \(got "cert.pem"\)/)
      expect(fd_count).to eq(before)
    end

    it "raises ArgumentError for a bad handshake_timeout, or one without an ssl_context" do
      [-1, Float::NAN, Float::INFINITY].each do |bad|
        expect { Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: certs.server_context, handshake_timeout: bad) {} }
          .to raise_error(ArgumentError, /handshake_timeout/)
      end
      expect { Evix::TCPServer.new(ev, "127.0.0.1", 0, handshake_timeout: 1) {} }
        .to raise_error(ArgumentError, /handshake_timeout needs an ssl_context/)
    end

    it "raises at TCPServer.new for a key that does not match the certificate" do
      context = certs.server_context
      context.key = OpenSSL::PKey::EC.generate("prime256v1")
      expect { Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: context) {} }
        .to raise_error(OpenSSL::SSL::SSLError, /key values mismatch/)
    end

    it "raises TypeError/ArgumentError at TCPClient.connect before connecting" do
      listener = track_io(TCPServer.new("127.0.0.1", 0)).first
      port = listener.addr[1]
      context = certs.client_context
      {
        { ssl_context: :yes } => [TypeError, /ssl_context must be an OpenSSL::SSL::SSLContext/],
        { ssl_context: context, hostname: 42 } => [TypeError, /hostname must be a String/],
        { ssl_context: context, verify: "no" } => [TypeError, /verify must be true or false/],
        { ssl_context: context, handshake_timeout: -1 } => [ArgumentError, /handshake_timeout/],
        { hostname: "localhost" } => [ArgumentError, /need an ssl_context/],
        { verify: false } => [ArgumentError, /need an ssl_context/]
      }.each do |options, (error, message)|
        expect { Evix::TCPClient.connect(ev, "127.0.0.1", port, **options) }.to raise_error(error, message)
      end
      expect(listener.accept_nonblock(exception: false)).to eq(:wait_readable) # nothing connected
    end

    it "refuses to verify with a context already set up without verification" do
      context = OpenSSL::SSL::SSLContext.new
      context.setup
      expect { Evix::TCPClient.connect(ev, "127.0.0.1", 1, ssl_context: context) }
        .to raise_error(ArgumentError, /does not verify certificates \(VERIFY_NONE\) and is already set up/)
    end

    it "raises Evix::Error for a TLS write from another thread" do
      result = in_tls_run(:poll) do |ev|
        a, b = UNIXSocket.pair
        io = Evix::IO.new(ev, OpenSSL::SSL::SSLSocket.new(a, certs.server_context))
        error = Thread.new { outcome_of { io.write("x") } }.value
        io.close
        b.close
        error
      end
      expect(result).to match(["Evix::Error", /written on its loop's thread only/])
    end
  end

  it "leaves openssl unloaded by require \"evix\", plain servers and IOs (even beside net/http's autoload)" do
    run = run_ruby(<<~RUBY)
      require "net/http" # autoload :OpenSSL, "openssl"
      loaded = -> { $LOADED_FEATURES.grep(%r{/openssl\\.so\\z}).empty? ? "not loaded" : "loaded" }
      before = loaded.call
      evloop = Evix::Loop.new
      Evix::TCPServer.new(evloop, "127.0.0.1", 0) {}.close
      a, b = UNIXSocket.pair
      evloop.wrap(a).close
      after_plain = loaded.call
      Evix::TLS
      puts before, after_plain, loaded.call
    RUBY
    expect(run.success?).to be(true), run.err
    expect(lines(run)).to eq(["not loaded", "not loaded", "loaded"])
  end

  describe "exe/evix echo --tls-cert FILE --tls-key FILE" do
    def evix(*args)
      Open3.capture3(RbConfig.ruby, "-I", File.join(ExampleProcess::ROOT, "lib"), ExampleProcess::EXE, *args)
    end

    it "serves openssl s_client over TLS and ends its session on SIGTERM" do
      certs.with_pem_files do |dir|
        ExampleProcess.run("echo", "--tls-cert", File.join(dir, "server.pem"),
                           "--tls-key", File.join(dir, "server.key")) do |server|
          command = ["openssl", "s_client", "-connect", "127.0.0.1:#{server.port}", "-quiet",
                     "-CAfile", File.join(dir, "ca.pem"), "-verify_return_error"]
          Open3.popen3(*command) do |stdin, stdout, stderr, process|
            stdin.write("over tls\n")
            stdin.close
            expect(stdout.gets).to eq("over tls\n")
            server.signal(:TERM) # drains: close_notify, and s_client exits by itself
            expect(server.wait.exitstatus).to eq(0)
            expect(process.value.exitstatus).to eq(0), stderr.read
          end
        end
      end
    end

    it "exits 2 for one file without the other, and 1 with a message for a key that does not fit" do
      certs.with_pem_files do |dir|
        _out, err, status = evix("echo", "--tls-cert", File.join(dir, "server.pem"))
        expect([status.exitstatus, err]).to match([2, /--tls-cert and --tls-key go together/])
        File.write(File.join(dir, "other.key"), OpenSSL::PKey::EC.generate("prime256v1").private_to_pem)
        _out, err, status = evix("echo", "--port", "0", "--tls-cert", File.join(dir, "server.pem"),
                                 "--tls-key", File.join(dir, "other.key"))
        expect([status.exitstatus, err]).to match([1, /\Aevix echo: TLS: public key mismatch/])
      end
    end
  end

  describe "stdlib OpenSSL under Evix.run (the scheduler's hooks)" do
    it "an OpenSSL::SSL::SSLSocket over a TCPSocket waits in the loop: another fiber runs while it reads" do
      result = in_tls_run(nil) do |ev|
        log = []
        server = Evix::TCPServer.new(ev, "127.0.0.1", 0, ssl_context: certs.server_context) do |client|
          line = client.gets
          log << :request
          ev.sleep(0.001) until log.count(:tick) == 3 # answers only once the ticker ran
          client.write(line.upcase)
        end
        Fiber.schedule do
          sleep 0.001 until log.include?(:request)
          3.times do
            sleep 0.01
            log << :tick
          end
        end
        ssl = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", server.port), certs.client_context)
        ssl.hostname = "localhost"
        ssl.sync_close = true
        ssl.connect
        ssl.post_connection_check("localhost")
        ssl.write("ping\n")
        answer = ssl.gets # blocks this fiber only: the server and the ticker run meanwhile
        log << :answer
        ssl.close
        server.shutdown(timeout: 1)
        [answer, log]
      end
      expect(result).to eq(["PING\n", %i[request tick tick tick answer]])
    end

    it "Net::HTTP over https to an OpenSSL::SSL::SSLServer in another fiber, with a third fiber running meanwhile" do
      result = in_tls_run(nil) do
        log = []
        tcp = TCPServer.new("127.0.0.1", 0)
        listener = OpenSSL::SSL::SSLServer.new(tcp, certs.server_context)
        Fiber.schedule do
          connection = listener.accept
          nil while connection.gets("\r\n") != "\r\n"
          log << :request
          sleep 0.001 until log.count(:tick) == 3
          connection.write("HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello https")
          connection.close
        end
        Fiber.schedule do
          sleep 0.001 until log.include?(:request)
          3.times do
            sleep 0.01
            log << :tick
          end
        end
        http = Net::HTTP.new("localhost", tcp.addr[1])
        http.ipaddr = "127.0.0.1"
        http.use_ssl = true
        http.cert_store = OpenSSL::X509::Store.new.tap { |store| store.add_cert(certs.pki.ca_cert) }
        http.verify_mode = OpenSSL::SSL::VERIFY_PEER
        response = http.get("/")
        log << :response
        listener.close
        [response.code, response.body, log]
      end
      expect(result).to eq(["200", "hello https", %i[request tick tick tick response]])
    end
  end
end
