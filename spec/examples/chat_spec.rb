# frozen_string_literal: true

require "spec_helper"
require "tmpdir"
require_relative "../../examples/chat"

RSpec.describe "evix chat (examples/chat.rb)" do
  let(:default_welcome) { "Welcome to the evix chat! Type /nick NAME to choose a name." }

  # Runs `evix chat` in a fresh directory (so ./welcome.txt is under the spec's control).
  def with_chat(*args, welcome: nil, env: {})
    Dir.mktmpdir("evix-chat-") do |dir|
      File.write(File.join(dir, "welcome.txt"), welcome) if welcome
      ExampleProcess.run("chat", *args, chdir: dir, env: env) { |server| yield server, dir }
    end
  end

  # Connects and reads the greeting: the welcome line, then "* you are NAME".
  # @return [Array(LineSocket, String)] the client and its name
  def join(server, welcome: default_welcome, **options)
    client = server.connect(**options)
    expect(client.gets).to eq(welcome)
    line = client.gets
    expect(line).to match(/\A\* you are guest\d+\z/)
    [client, line.delete_prefix("* you are ")]
  end

  it "greets with the welcome line and a guest name, and tells the room who joined" do
    with_chat do |server|
      expect(server.banner).to eq("evix chat listening on 127.0.0.1:#{server.port}")
      alice, alice_name = join(server)
      bob, bob_name = join(server)
      expect([alice_name, bob_name]).to eq(%w[guest1 guest2])
      expect(alice.gets).to eq("* guest2 joined")
      expect(bob.quiet?).to be(true)
    end
  end

  it "sends every line to all the other clients, prefixed with the sender's name" do
    with_chat do |server|
      alice, = join(server)
      bob, = join(server)
      carol, = join(server)
      expect([alice.gets, alice.gets, bob.gets]).to eq(["* guest2 joined", "* guest3 joined", "* guest3 joined"])

      alice.puts("hi all")
      bob.puts("hello alice")
      expect([bob.gets, carol.gets, carol.gets]).to eq(["guest1: hi all", "guest1: hi all", "guest2: hello alice"])
      expect(alice.gets).to eq("guest2: hello alice")
      expect(alice.quiet?).to be(true) # never an echo of one's own line
    end
  end

  it "renames with /nick and rejects a name that is taken" do
    with_chat do |server|
      alice, = join(server)
      bob, = join(server)
      expect(alice.gets).to eq("* guest2 joined")

      alice.puts("/nick alice")
      expect(alice.gets).to eq("* you are now alice")
      expect(bob.gets).to eq("* guest1 is now alice")

      bob.puts("/nick alice")
      expect(bob.gets).to eq("* the name alice is taken")
      bob.puts("/nick")
      expect(bob.gets).to start_with("* usage: /nick NAME")
      bob.puts("/nick two words")
      expect(bob.gets).to start_with("* usage: /nick NAME")
      bob.puts("/shout hi")
      expect(bob.gets).to eq("* unknown command /shout (try /nick NAME)")
      expect(alice.quiet?).to be(true)

      bob.puts("/nick bob")
      expect(bob.gets).to eq("* you are now bob")
      expect(alice.gets).to eq("* guest2 is now bob")
      alice.puts("hi bob")
      expect(bob.gets).to eq("alice: hi bob")

      # The old name is free again; new guests skip names in use.
      carol, carol_name = join(server)
      expect(carol_name).to eq("guest3")
      carol.puts("/nick guest1")
      expect(carol.gets).to eq("* you are now guest1")
    end
  end

  it "passes UTF-8 names and text through untouched" do
    with_chat do |server|
      alice, = join(server)
      bob, = join(server)
      expect(alice.gets).to eq("* guest2 joined")
      alice.puts("/nick zoë")
      expect(alice.gets.force_encoding(Encoding::UTF_8)).to eq("* you are now zoë")
      expect(bob.gets.force_encoding(Encoding::UTF_8)).to eq("* guest1 is now zoë")
      alice.puts("ça va? ☕")
      expect(bob.gets.force_encoding(Encoding::UTF_8)).to eq("zoë: ça va? ☕")
    end
  end

  it "sends a UTF-8 welcome and members' non-ASCII lines side by side, and serves on" do
    with_chat("--welcome", "welcome.txt", welcome: "Bienvenue à tous ☕\n") do |server|
      welcome = "Bienvenue à tous ☕".b
      alice, = join(server, welcome: welcome)
      bob, = join(server, welcome: welcome)
      expect(alice.gets).to eq("* guest2 joined")
      alice.puts("ça va? ☕")
      expect(bob.gets.force_encoding(Encoding::UTF_8)).to eq("guest1: ça va? ☕")
      # Carol's /nick is read before her first lines are written: the welcome
      # and a line with her non-ASCII name are in her outbox together.
      server.signal(:STOP)
      carol = server.connect
      carol.puts("/nick zoë")
      server.signal(:CONT)
      expect(carol.gets).to eq(welcome)
      expect(carol.gets).to eq("* you are guest3")
      expect(carol.gets.force_encoding(Encoding::UTF_8)).to eq("* you are now zoë")
      expect([alice.gets, bob.gets]).to eq(["* guest3 joined", "* guest3 joined"])
      carol.puts("é")
      expect([alice.gets, bob.gets, alice.gets, bob.gets].map { |line| line.force_encoding(Encoding::UTF_8) })
        .to eq(["* guest3 is now zoë", "* guest3 is now zoë", "zoë: é", "zoë: é"])
      expect(server.stderr).not_to match(/Error/)
    end
  end

  it "tells the room when a client leaves" do
    with_chat do |server|
      alice, = join(server)
      bob, = join(server)
      expect(alice.gets).to eq("* guest2 joined")
      bob.close
      expect(alice.gets).to eq("* guest2 left")
    end
  end

  it "kicks a client that sends nothing for --idle seconds and tells the room", timing: true do
    with_chat("--idle", "0.3") do |server|
      started = LineSocket.now # before the server accepts the idler and starts its clock
      idler, = join(server)
      talker, = join(server)
      expect(idler.gets).to eq("* guest2 joined")

      # The talker keeps itself alive with a command every 0.1 s until the idler is gone.
      kicked = nil
      until kicked
        talker.puts("/ping")
        expect(talker.gets).to eq("* unknown command /ping (try /nick NAME)")
        kicked = talker.gets(timeout: 0.1) unless talker.quiet?(timeout: 0.1)
      end
      expect(kicked).to eq("* guest1 was kicked (idle for 0.3s)")
      expect(idler.gets).to eq("* you were idle for 0.3s, bye")
      expect(idler.gets).to be_nil
      expect(LineSocket.now - started).to be >= 0.25

      # The talker, once silent, goes the same way.
      expect(talker.gets(timeout: 2)).to eq("* you were idle for 0.3s, bye")
      expect(talker.gets).to be_nil
    end
  end

  it "re-reads the --welcome file on SIGHUP; a missing file keeps the old text and logs it" do
    with_chat("--welcome", "welcome.txt", welcome: "Hello, first edition\n") do |server, dir|
      first, = join(server, welcome: "Hello, first edition")
      first.close

      File.write(File.join(dir, "welcome.txt"), "Hello, second edition\n")
      server.signal(:HUP)
      greeting = nil
      wait_until do
        greeting = server.connect.gets
        greeting != "Hello, first edition"
      end
      expect(greeting).to eq("Hello, second edition")

      File.delete(File.join(dir, "welcome.txt"))
      server.signal(:HUP)
      wait_until { server.stderr.include?("keeping the current welcome text") }
      expect(server.stderr).to include("welcome.txt")
      join(server, welcome: "Hello, second edition")
    end
  end

  it "starts silently with its built-in welcome line without --welcome, reading no file (not even ./welcome.txt)" do
    with_chat(welcome: "only read when asked for") do |server|
      join(server, welcome: default_welcome)
      server.signal(:HUP)
      join(server, welcome: default_welcome)
      expect(server.stderr).to be_empty
    end
  end

  it "takes the welcome file's path from --welcome" do
    with_chat("--welcome", "motd", welcome: "not this one") do |server, dir|
      File.write(File.join(dir, "motd"), "Message of the day")
      server.signal(:HUP)
      wait_until { server.connect.gets == "Message of the day" }
    end
  end

  # A client that does not read (a tiny receive buffer, then nothing) must not
  # hold up the room: its lines wait in its own queue on the server.
  def flood(sender, count)
    payload = "x" * 1000
    writer = Thread.new { count.times { |i| sender.puts("line #{i} #{payload}") } }
    [writer, ->(i) { "guest1: line #{i} #{payload}" }]
  end

  it "does not let a client that never reads hold up the others" do
    with_chat("--max-outbox", "16000000") do |server| # room for the whole flood: see the next example for less
      sender, = join(server)
      slow, = join(server, rcvbuf: 4096)
      fast, = join(server)
      expect([sender.gets, sender.gets]).to eq(["* guest2 joined", "* guest3 joined"])
      expect(slow.gets).to eq("* guest3 joined")

      writer, line = flood(sender, 3000)
      3000.times { |i| expect(fast.gets(timeout: 3)).to eq(line.call(i)) }
      writer.join

      # The slow client still gets every line, in order, once it reads.
      3000.times { |i| expect(slow.gets(timeout: 3)).to eq(line.call(i)) }
    ensure
      writer&.kill
    end
  end

  # Resident memory of a process, in bytes.
  def rss(pid)
    Integer(File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+) kB/, 1]) * 1024
  end

  # Ruby's GC lets up to 32 MiB of garbage strings pile up between two runs
  # by default; a low malloc limit makes RSS show what the server holds.
  let(:tight_gc) do
    %w[RUBY_GC_MALLOC_LIMIT RUBY_GC_MALLOC_LIMIT_MAX RUBY_GC_OLDMALLOC_LIMIT RUBY_GC_OLDMALLOC_LIMIT_MAX]
      .to_h { |name| [name, "4000000"] }
  end

  it "disconnects a member whose outbox goes over --max-outbox; memory stays bounded and the room goes on" do
    with_chat(env: tight_gc) do |server| # the default outbox: 1 MiB
      sender, = join(server)
      slow, = join(server, rcvbuf: 4096)
      expect(sender.gets).to eq("* guest2 joined")
      before = rss(server.pid)

      # 32 MB for a member that never reads: 8000 lines of 4000 bytes.
      line = "#{"x" * 3999}\n"
      writer = Thread.new { 8000.times { sender.io.write(line) } }
      expect(sender.gets(timeout: 8)).to eq("* guest2 was disconnected (it did not read)")
      writer.join
      sender.puts("/done") # answered only once every line before it went through the room
      expect(sender.gets(timeout: 8)).to eq("* unknown command /done (try /nick NAME)")
      grown = rss(server.pid) - before
      expect(grown).to be < 16 * 1024 * 1024, "the server grew by #{grown / 1024} KiB"

      log = server.stderr.lines(chomp: true)
      expect(log).to eq(["evix chat: disconnected guest2: more than 1048576 bytes waiting to be sent " \
                         "(it does not read)"])
      expect(slow.lines_until_eof(timeout: 5).last).to start_with("guest1: xxx") # what it had, then the end

      carol, = join(server)
      expect(sender.gets).to eq("* guest3 joined")
      sender.puts("still here")
      expect(carol.gets).to eq("guest1: still here")
    ensure
      writer&.kill
    end
  end

  # Every join, line and leave goes to every member: a room that 1,000
  # clients join at once holds about a million deliveries. Each is a
  # reference to one shared line, not a copy per member.
  it "stays bounded when 1,000 clients each send a line and reset, and serves on afterwards" do
    with_chat(env: tight_gc) do |server|
      watcher, = join(server)
      before = rss(server.pid)
      1000.times do |i|
        socket = Socket.tcp("127.0.0.1", server.port)
        socket.write("hello from #{i}\n")
        socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
        socket.close
      end
      joined = 0
      until joined == 1000
        line = watcher.gets(timeout: 20) or break
        joined += 1 if line.end_with?(" joined")
      end
      watcher.puts("/done")
      nil until watcher.gets(timeout: 20) == "* unknown command /done (try /nick NAME)"
      expect(joined).to eq(1000)
      grown = rss(server.pid) - before
      expect(grown).to be < 16 * 1024 * 1024, "the server grew by #{grown / 1024} KiB"
      expect(server.stderr).not_to match(/Error/)
      _, name = join(server)
      expect(watcher.gets).to eq("* #{name} joined")
    end
  end

  it "refuses a max_outbox that is not a positive Integer, at the call" do
    expect { Evix::Examples::Chat.new(max_outbox: 0) }.to raise_error(ArgumentError, /max_outbox must be a positive/)
    expect { Evix::Examples::Chat.new(max_outbox: 1.5) }.to raise_error(ArgumentError, /got 1.5/)
    expect { Evix::Examples::Chat.new(max_outbox: "1") }.to raise_error(ArgumentError)
  end

  it "drains on SIGTERM: exits 0 after every queued line reached a connected client" do
    with_chat("--max-outbox", "16000000") do |server|
      sender, = join(server)
      slow, = join(server, rcvbuf: 4096)
      expect(sender.gets).to eq("* guest2 joined")

      writer, line = flood(sender, 3000)
      writer.join
      sender.puts("/done") # replied to only after the 3000 lines are in the slow client's queue
      expect(sender.gets(timeout: 5)).to eq("* unknown command /done (try /nick NAME)")

      server.signal(:TERM)
      received = slow.lines_until_eof(timeout: 5)
      expect(received.first(3000)).to eq(Array.new(3000) { |i| line.call(i) })
      expect(received.drop(3000)).to include("* the server is shutting down")
      expect(sender.lines_until_eof).to include("* the server is shutting down")
      expect(server.wait.exitstatus).to eq(0)
      expect(server.stderr).not_to include("closed") # nothing had to be cut at the deadline
    end
  end
end
