# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "../../examples/kv"

RSpec.describe Evix::Examples::KV do
  let(:kv) { described_class.new }

  it "executes commands in-process, without a socket" do
    expect(kv.execute(%w[SET a 1])).to eq(described_class::OK)
    expect(kv.execute(%w[GET a])).to eq("1")
    expect(kv.execute(%w[INCR a])).to eq(2)
    expect(kv.execute(%w[TTL a])).to eq(-1)
    expect(kv.execute(%w[GET b])).to be_nil
    expect(kv.execute(%w[NOPE])).to eq(described_class::ErrorReply.new("ERR unknown command 'NOPE'"))
  end

  it "encodes every kind of reply as RESP and as an inline line" do
    replies = [described_class::OK, described_class::ErrorReply.new("ERR no"), 42, "v\r\n", nil, ["save", ""], []]
    expect(replies.map { |reply| described_class.resp(reply) })
      .to eq(["+OK\r\n", "-ERR no\r\n", ":42\r\n", "$3\r\nv\r\n\r\n", "$-1\r\n",
              "*2\r\n$4\r\nsave\r\n$0\r\n\r\n", "*0\r\n"])
    expect(replies.map { |reply| described_class.inline(reply) })
      .to eq(["OK", "ERR no", "42", "v\r\n", "(nil)", "save ", "(empty array)"])
  end

  it "answers SET's NX, XX, EX and PX options as Redis does" do
    expect(kv.execute(%w[SET k 1 XX])).to be_nil
    expect(kv.execute(%w[SET k 1 NX])).to eq(described_class::OK)
    expect(kv.execute(%w[SET k 2 NX])).to be_nil
    expect(kv.execute(%w[GET k])).to eq("1")
    expect(kv.execute(%w[SET k 3 xx])).to eq(described_class::OK)
    ["SET k 4 EX 0", "SET k 4 PX -5", "SET k 4 EX soon", "SET k 4 EX 1e300", "SET k 4 EX 1 PX 1000"].each do |line|
      expect(kv.execute(line.split)).to eq(described_class::ErrorReply.new("ERR invalid expire time in 'set' command"))
    end
    expect(kv.execute(%w[SET k 4 NX XX])).to eq(described_class::ErrorReply.new("ERR syntax error"))
    expect(kv.execute(%w[SET k 4 FOREVER])).to eq(described_class::ErrorReply.new("ERR syntax error"))
    expect(kv.execute(%w[GET k])).to eq("3") # a SET that errs stores nothing
  end

  it "counts INCR in signed 64-bit integers and refuses what is not one" do
    expect(kv.execute(%w[SET n 9223372036854775806])).to eq(described_class::OK)
    expect(kv.execute(%w[INCR n])).to eq(9_223_372_036_854_775_807)
    expect(kv.execute(%w[INCR n])).to eq(described_class::ErrorReply.new("ERR increment or decrement would overflow"))
    not_integer = described_class::ErrorReply.new("ERR value is not an integer or out of range")
    %w[1.5 abc 99999999999999999999 1_0].each do |value|
      kv.execute(["SET", "n", value])
      expect(kv.execute(%w[INCR n])).to eq(not_integer), value
      expect(kv.execute(%w[GET n])).to eq(value)
    end
  end
end

RSpec.describe "evix kv (examples/kv.rb)" do
  max_value = Evix::Examples::KV::MAX_VALUE
  max_request = Evix::Examples::KV::MAX_REQUEST

  around do |example|
    ExampleProcess.run("kv") do |server|
      @server = server
      @client = server.connect
      example.run
    end
  end

  # Sends one command and returns the reply line.
  def kv(command, client: @client)
    client.puts(command)
    client.gets
  end

  # Sends raw bytes on a new connection, then end of file; returns what
  # arrives until the server closes it.
  def raw(bytes)
    client = @server.connect
    client.io.write(bytes)
    client.io.close_write
    client.lines_until_eof(timeout: 5).join("\n")
  end

  it "prints where it listens" do
    expect(@server.banner).to eq("evix kv listening on 127.0.0.1:#{@server.port}")
  end

  describe "the inline protocol" do
    it "answers SET, GET and DEL" do
      expect(kv("GET name")).to eq("(nil)")
      expect(kv("SET name alice")).to eq("OK")
      expect(kv("GET name")).to eq("alice")
      expect(kv("SET name bob")).to eq("OK")
      expect(kv("get name")).to eq("bob") # commands are case-insensitive, keys are not
      expect(kv("GET NAME")).to eq("(nil)")
      expect(kv("SET other x")).to eq("OK")
      expect(kv("DEL name other missing")).to eq("2")
      expect(kv("DEL name")).to eq("0")
      expect(kv("GET name")).to eq("(nil)")
      expect(kv("PING")).to eq("PONG")
      expect(kv("INCR hits")).to eq("1")
    end

    it "shares one store between connections" do
      other = @server.connect
      expect(kv("SET shared 42")).to eq("OK")
      expect(kv("GET shared", client: other)).to eq("42")
    end

    it "rejects unknown commands and wrong arities, and ignores blank lines" do
      @client.puts("")
      expect(kv("FLUSHALL")).to eq("ERR unknown command 'FLUSHALL'")
      expect(kv("SET key")).to eq("ERR wrong number of arguments for 'set' command")
      expect(kv("SET key two words")).to eq("ERR syntax error")
      expect(kv("GET")).to eq("ERR wrong number of arguments for 'get' command")
      expect(kv("EXPIRE key")).to eq("ERR wrong number of arguments for 'expire' command")
      expect(kv("TTL")).to eq("ERR wrong number of arguments for 'ttl' command")
      expect(kv("SET key value")).to eq("OK")
      expect(kv("TTL key")).to eq("-1")
    end

    it "answers a last line that has no newline before end of file" do
      expect(raw("SET a 1\nGET a")).to eq("OK\n1")
    end
  end

  describe "limits" do
    it "refuses a value over the limit with an error and keeps the old one whole, never truncated" do
      expect(kv("SET big small")).to eq("OK")
      expect(kv("SET big #{"v" * (max_value + 1)}")).to eq("ERR value longer than #{max_value} bytes")
      expect(kv("GET big")).to eq("small")
      expect(kv("SET big #{"v" * max_value}")).to eq("OK") # the limit itself is fine
      expect(kv("GET big")).to eq("v" * max_value)
    end

    it "refuses an inline line over the request limit, drops the rest of it, and goes on" do
      @client.io.write("SET huge #{"x" * (3 * max_request)}\n")
      expect(@client.gets(timeout: 5)).to eq("ERR request longer than #{max_request} bytes")
      expect(kv("GET huge")).to eq("(nil)")
      expect(kv("PING")).to eq("PONG")
      expect(@server.stderr).to be_empty
    end

    it "validates EXPIRE's seconds: huge, negative or not a number is an error and the connection stays" do
      expect(kv("SET key value")).to eq("OK")
      expect(kv("EXPIRE key 60")).to eq("1")
      %w[1e300 -1 soon nan inf 4e9].each do |seconds|
        expect(kv("EXPIRE key #{seconds}")).to start_with("ERR seconds must be a number from 0 to "), seconds
      end
      expect(kv("TTL key")).to eq("60") # the expiry a bad EXPIRE came after is still there
      expect(kv("GET key")).to eq("value")
      expect(@server.stderr).to be_empty
    end
  end

  describe "RESP" do
    it "answers arrays of bulk strings with typed replies, pipelined, next to inline lines" do
      @client.io.write("*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$6\r\nbin\0\r\n\r\n" \
                       "*2\r\n$3\r\nGET\r\n$3\r\nk\r\n\r\n*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n" \
                       "*2\r\n$3\r\nGET\r\n$1\r\nx\r\n*0\r\nPING\n*1\r\n$4\r\nPING\r\n")
      # (LineSocket#gets chomps "\r\n" as well as "\n".)
      expect(Array.new(8) { @client.gets }).to eq(["+OK", "$6", "bin\0", "", ":1", "$-1", "PONG", "+PONG"])
    end

    it "echoes an unknown command on one line, cut short, so the reply stays one RESP error" do
      @client.io.write("*1\r\n$8\r\nNO\r\nPING\r\n*1\r\n$100\r\n#{"y" * 100}\r\n")
      expect(@client.gets).to eq("-ERR unknown command 'NO  PING'")
      expect(@client.gets).to eq("-ERR unknown command '#{"y" * 64}'")
    end

    it "answers a protocol error with an error reply and closes that connection only" do
      {
        "*1025\r\n" => "array: a length of 1025 is over the limit of 1024",
        "*1\r\n$#{max_request + 1}\r\n" => "a length of #{max_request + 1} is over the limit of #{max_request}",
        "*2\r\n$3\r\nGET\r\n$#{max_request - 2}\r\n" => "over the limit of #{max_request - 3}",
        "*1\r\n:1\r\n" => "expected '$' and a length, got \":1\\r\\n\"",
        "*x\r\n" => "expected '*' and a length",
        "*1\r\n$4\r\nPINGxx" => "a bulk string does not end in CRLF"
      }.each do |request, message|
        expect(raw(request)).to start_with("-ERR Protocol error: ").and include(message.delete_prefix("array: "))
      end
      expect(kv("PING")).to eq("PONG") # the first connection never noticed
    end

    it "serves redis-cli, Debian's real client" do
      cli = lambda do |*args, stdin: ""|
        out, err, status = Open3.capture3("timeout", "5", "redis-cli", "-p", @server.port.to_s, *args,
                                          stdin_data: stdin)
        raise "redis-cli #{args.join(" ")}: #{status.inspect} #{err}" unless status.success?

        out
      end
      expect(cli.call("PING")).to eq("PONG\n")
      expect(cli.call("SET", "k", "hello world")).to eq("OK\n")
      expect(cli.call("GET", "k")).to eq("hello world\n")
      expect(cli.call("GET", "missing")).to eq("\n")
      expect(cli.call("INCR", "counter")).to eq("1\n")
      expect(cli.call("INCR", "counter")).to eq("2\n")
      expect(cli.call("INCR", "k")).to eq("ERR value is not an integer or out of range\n\n") # as against redis-server
      expect(cli.call("TTL", "k")).to eq("-1\n")
      expect(cli.call("EXPIRE", "k", "100")).to eq("1\n")
      expect(cli.call("TTL", "k")).to eq("100\n")
      expect(cli.call("EXPIRE", "k", "1e300")).to start_with("ERR seconds must be a number from 0 to ")
      expect(cli.call("SET", "s", "v", "EX", "50")).to eq("OK\n")
      expect(cli.call("TTL", "s")).to eq("50\n")
      expect(cli.call("SET", "s", "w", "NX")).to eq("\n")
      expect(cli.call("DEL", "k", "s", "nope")).to eq("2\n")
      # -x: the last argument from stdin, a value one byte over the limit.
      expect(cli.call("-x", "SET", "big", stdin: "x" * (max_value + 1)))
        .to eq("ERR value longer than #{max_value} bytes\n\n")
      # Piped, redis-cli first asks COMMAND DOCS, as it does at a terminal.
      expect(cli.call(stdin: "SET a 1\nGET a\nINCR a\n")).to eq("OK\n1\n2\n")
      expect(kv("GET a")).to eq("2") # one store for both protocols
    end

    it "serves redis-benchmark -t set,get, Debian's real load generator", timing: true do
      out, err, status = Open3.capture3("timeout", "60", "redis-benchmark", "-p", @server.port.to_s,
                                        "-t", "set,get", "-n", "2000", "-q")
      expect(status.exitstatus).to eq(0), err
      results = out.scan(/(SET|GET): ([\d.]+) requests per second/)
      expect(results.map(&:first)).to eq(%w[SET GET]), out
      expect(results.map { |_, rate| Float(rate) }).to all(be_positive)
      expect(out + err).not_to match(/ERROR|WARNING/)
      expect(kv("GET key:__rand_int__")).to match(/\A.{3}\z/) # redis-benchmark's own key, a 3-byte value
    end
  end

  it "exits 0 on SIGTERM even with expiry timers pending" do
    expect(kv("SET key value")).to eq("OK")
    expect(kv("EXPIRE key 60")).to eq("1")
    @server.signal(:TERM)
    expect(@client.gets(timeout: 5)).to be_nil
    expect(@server.wait.exitstatus).to eq(0)
  end

  describe "expiry" do
    it "answers TTL with -2 without key, -1 without expiry, else the seconds left rounded up", timing: true do
      expect(kv("TTL key")).to eq("-2")
      expect(kv("EXPIRE key 10")).to eq("0") # no key: nothing to expire
      expect(kv("TTL key")).to eq("-2")
      expect(kv("SET key value")).to eq("OK")
      expect(kv("TTL key")).to eq("-1")
      expect(kv("EXPIRE key 2.5")).to eq("1")
      expect(kv("TTL key")).to eq("3")
      expect(kv("EXPIRE key 0.5")).to eq("1") # a new EXPIRE replaces the old deadline
      expect(kv("TTL key")).to eq("1")
    end

    it "removes a key when its expiry passes, from EXPIRE or SET's PX", timing: true do
      expect(kv("SET key value")).to eq("OK")
      expect(kv("EXPIRE key 0.5")).to eq("1")
      expect(kv("SET other value PX 500")).to eq("OK")
      expect(kv("GET key")).to eq("value")
      sleep 0.8
      expect(kv("GET key")).to eq("(nil)")
      expect(kv("GET other")).to eq("(nil)")
      expect(kv("TTL key")).to eq("-2")
      expect(kv("DEL key")).to eq("0")
    end

    it "removes a key at once for EXPIRE 0" do
      expect(kv("SET key value")).to eq("OK")
      expect(kv("EXPIRE key 0")).to eq("1")
      expect(kv("GET key")).to eq("(nil)")
    end

    it "cancels the expiry on DEL: a key set again afterwards stays", timing: true do
      expect(kv("SET key old")).to eq("OK")
      expect(kv("EXPIRE key 0.5")).to eq("1")
      expect(kv("DEL key")).to eq("1")
      expect(kv("SET key new")).to eq("OK")
      sleep 0.8
      expect(kv("GET key")).to eq("new")
      expect(kv("TTL key")).to eq("-1")
    end

    it "cancels the expiry on SET, keeps it on INCR", timing: true do
      expect(kv("SET key old")).to eq("OK")
      expect(kv("EXPIRE key 0.5")).to eq("1")
      expect(kv("SET key new")).to eq("OK")
      expect(kv("TTL key")).to eq("-1")
      expect(kv("SET n 1 EX 30")).to eq("OK")
      expect(kv("INCR n")).to eq("2")
      expect(kv("TTL n")).to eq("30")
      sleep 0.8
      expect(kv("GET key")).to eq("new")
    end

    it "keeps only the latest EXPIRE's timer", timing: true do
      expect(kv("SET key value")).to eq("OK")
      expect(kv("EXPIRE key 0.5")).to eq("1")
      expect(kv("EXPIRE key 10")).to eq("1")
      sleep 0.8
      expect(kv("GET key")).to eq("value")
      expect(kv("TTL key")).to eq("10")
    end
  end
end
