# frozen_string_literal: true

require "spec_helper"
require_relative "support/example_process"
require_relative "../../examples/kv"

RSpec.describe Evix::Examples::KV do
  it "executes commands in-process, without a socket" do
    kv = described_class.new
    expect(kv.execute(%w[SET a 1])).to eq("OK")
    expect(kv.execute(%w[GET a])).to eq("1")
    expect(kv.execute(%w[TTL a])).to eq("-1")
    expect(kv.execute(%w[NOPE])).to eq("ERR unknown command")
    expect(kv.execute([])).to be_nil
  end
end

RSpec.describe "evix kv (examples/kv.rb)" do
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

  it "prints where it listens" do
    expect(@server.banner).to eq("evix kv listening on 127.0.0.1:#{@server.port}")
  end

  it "answers SET, GET and DEL" do
    expect(kv("GET name")).to eq("(nil)")
    expect(kv("SET name alice")).to eq("OK")
    expect(kv("GET name")).to eq("alice")
    expect(kv("SET name bob")).to eq("OK")
    expect(kv("get name")).to eq("bob") # commands are case-insensitive, keys are not
    expect(kv("GET NAME")).to eq("(nil)")
    expect(kv("DEL name")).to eq("1")
    expect(kv("DEL name")).to eq("0")
    expect(kv("GET name")).to eq("(nil)")
  end

  it "shares one store between connections" do
    other = @server.connect
    expect(kv("SET shared 42")).to eq("OK")
    expect(kv("GET shared", client: other)).to eq("42")
  end

  it "rejects unknown commands and wrong arities, and ignores blank lines" do
    @client.puts("")
    expect(kv("INCR counter")).to eq("ERR unknown command")
    expect(kv("SET key")).to eq("ERR wrong number of arguments")
    expect(kv("SET key two words")).to eq("ERR wrong number of arguments")
    expect(kv("GET")).to eq("ERR wrong number of arguments")
    expect(kv("DEL a b")).to eq("ERR wrong number of arguments")
    expect(kv("EXPIRE key")).to eq("ERR wrong number of arguments")
    expect(kv("TTL")).to eq("ERR wrong number of arguments")
    expect(kv("SET key value")).to eq("OK")
    expect(kv("EXPIRE key soon")).to eq("ERR value is not a number")
    expect(kv("TTL key")).to eq("-1")
  end

  it "answers TTL with -2 without key, -1 without expiry, else the seconds left rounded up", timing: true do
    expect(kv("TTL key")).to eq("-2")
    expect(kv("EXPIRE key 10")).to eq("0") # no key: nothing to expire
    expect(kv("TTL key")).to eq("-2")
    expect(kv("SET key value")).to eq("OK")
    expect(kv("TTL key")).to eq("-1")
    expect(kv("EXPIRE key 2.5")).to eq("1")
    expect(kv("TTL key")).to eq("3")
    expect(kv("EXPIRE key 0.2")).to eq("1") # a new EXPIRE replaces the old deadline
    expect(kv("TTL key")).to eq("1")
  end

  it "removes a key when its expiry passes", timing: true do
    expect(kv("SET key value")).to eq("OK")
    expect(kv("EXPIRE key 0.2")).to eq("1")
    expect(kv("GET key")).to eq("value")
    sleep 0.35
    expect(kv("GET key")).to eq("(nil)")
    expect(kv("TTL key")).to eq("-2")
    expect(kv("DEL key")).to eq("0")
  end

  it "expires a key at once for a zero or negative EXPIRE" do
    expect(kv("SET key value")).to eq("OK")
    expect(kv("EXPIRE key 0")).to eq("1")
    expect(kv("GET key")).to eq("(nil)")
  end

  it "cancels the expiry on DEL: a key set again afterwards stays", timing: true do
    expect(kv("SET key old")).to eq("OK")
    expect(kv("EXPIRE key 0.2")).to eq("1")
    expect(kv("DEL key")).to eq("1")
    expect(kv("SET key new")).to eq("OK")
    sleep 0.35
    expect(kv("GET key")).to eq("new")
    expect(kv("TTL key")).to eq("-1")
  end

  it "cancels the expiry on SET" do
    expect(kv("SET key old")).to eq("OK")
    expect(kv("EXPIRE key 0.2")).to eq("1")
    expect(kv("SET key new")).to eq("OK")
    expect(kv("TTL key")).to eq("-1")
    sleep 0.35
    expect(kv("GET key")).to eq("new")
  end

  it "keeps only the latest EXPIRE's timer", timing: true do
    expect(kv("SET key value")).to eq("OK")
    expect(kv("EXPIRE key 0.2")).to eq("1")
    expect(kv("EXPIRE key 10")).to eq("1")
    sleep 0.35
    expect(kv("GET key")).to eq("value")
    expect(kv("TTL key")).to eq("10")
  end

  it "exits 0 on SIGTERM even with expiry timers pending" do
    expect(kv("SET key value")).to eq("OK")
    expect(kv("EXPIRE key 60")).to eq("1")
    @server.signal(:TERM)
    expect(@client.gets(timeout: 5)).to be_nil
    expect(@server.wait.exitstatus).to eq(0)
  end
end
