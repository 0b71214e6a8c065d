# frozen_string_literal: true

require "spec_helper"

# The native head parser and chunked decoder as lib/evix/http uses them;
# the framing rules themselves are tested in Rust (ext/evix/src/http/).
RSpec.describe Evix::HTTP::Parser do
  subject(:parser) { Evix::HTTP::Parser.new(8192, 65_536, 100, 1_000_000, 1024) }

  it "fills the env from a head at an offset and returns its length" do
    env = {}
    buffer = "xxGET /a%20b?q=1 HTTP/1.1\r\nHost: h\r\nX-Twice: 1\r\nX-Twice: 2\r\n" \
             "Content-Type: text/plain\r\nContent-Length: 3\r\nX_Hidden: y\r\n\r\nabc"
    expect(parser.parse(buffer, 2, env)).to eq(buffer.bytesize - 5)
    expect(env).to eq("REQUEST_METHOD" => "GET", "PATH_INFO" => "/a%20b", "QUERY_STRING" => "q=1",
                      "REQUEST_URI" => "/a%20b?q=1", "SERVER_PROTOCOL" => "HTTP/1.1", "HTTP_HOST" => "h",
                      "HTTP_X_TWICE" => "1, 2", "CONTENT_TYPE" => "text/plain", "CONTENT_LENGTH" => "3")
    expect([parser.content_length, parser.chunked?, parser.keep_alive?, parser.expect_continue?])
      .to eq([3, false, true, false])
  end

  it "says nil for an incomplete head, and touches nothing" do
    env = {}
    expect(parser.parse("GET / HTTP/1.1\r\nHost: h\r\n", 0, env)).to be_nil
    expect(env).to be_empty
  end

  it "keeps the last head's framing" do
    parser.parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", 0, {})
    expect([parser.content_length, parser.chunked?, parser.expect_continue?]).to eq([0, true, true])
    parser.parse("GET / HTTP/1.0\r\n\r\n", 0, {})
    expect([parser.chunked?, parser.keep_alive?, parser.expect_continue?]).to eq([false, false, false])
  end

  it "returns a refusal's status, negated, with its reason" do
    expect(parser.parse("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 0, {}))
      .to eq(-400)
    expect(parser.reason).to eq("conflicting Content-Length fields")
    expect(parser.parse("GET / HTTP/3.0\r\n\r\n", 0, {})).to eq(-505)
    expect(parser.parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000001\r\n\r\n", 0, {})).to eq(-413)
    expect(parser.max_body).to eq(1_000_000)
  end

  it "refuses an offset past the buffer, and bad limits at the call" do
    expect(parser.parse("GET", 10, {})).to eq(-400)
    expect { described_class.new(0, 1, 1, 1, 1) }.to raise_error(ArgumentError, /request_line must be positive/)
    expect { described_class.new(-1, 1, 1, 1, 1) }.to raise_error(RangeError)
    expect { described_class.new("1", 1, 1, 1, 1) }.to raise_error(TypeError)
  end

  describe Evix::HTTP::ChunkedDecoder do
    subject(:decoder) { described_class.new(parser) }

    it "decodes in place, across reads, and stops at the body's end" do
      out = +""
      expect(decoder.decode("..5\r\nhel", 2, out)).to eq(6)
      expect([out, decoder.done?]).to eq(["hel", false])
      expect(decoder.decode("lo\r\n0\r\n\r\nGET", 0, out)).to eq(9)
      expect([out, decoder.done?]).to eq(["hello", true])
    end

    it "returns a refusal's status, negated, with its reason" do
      expect(decoder.decode("zz\r\n", 0, +"")).to eq(-400)
      expect(decoder.reason).to eq("invalid chunk size")
      big = described_class.new(Evix::HTTP::Parser.new(1, 1, 1, 4, 16))
      expect(big.decode("5\r\n", 0, +"")).to eq(-413)
    end
  end
end

RSpec.describe Evix::HTTP::Limits do
  it "fills in the defaults, and refuses unknown options and bad values by name" do
    expect(described_class.new.max_body).to eq(64 * 1024 * 1024)
    expect(described_class.new(max_headers: 7).max_headers).to eq(7)
    expect { described_class.new(max_header: 7) }.to raise_error(ArgumentError, "unknown option: max_header")
    expect { described_class.new(max_body: 0) }.to raise_error(ArgumentError, "max_body must be positive (got 0)")
    expect { described_class.new(max_body: 1.5) }.to raise_error(TypeError, /max_body must be an Integer/)
    expect { described_class.new(header_timeout: -1) }.to raise_error(ArgumentError, /header_timeout/)
  end
end

RSpec.describe Evix::HTTP::Bind do
  it "parses tcp:// and unix: addresses, and refuses others" do
    expect(described_class.parse("tcp://127.0.0.1:80").options).to eq(host: "127.0.0.1", port: 80)
    expect(described_class.parse("tcp://[::1]:0").options).to eq(host: "::1", port: 0)
    expect(described_class.parse("unix:/tmp/s.sock").options).to eq(path: "/tmp/s.sock")
    expect { described_class.parse("http://x:1") }.to raise_error(ArgumentError, %r{tcp://HOST:PORT or unix:PATH})
    expect { described_class.parse("tcp://x:70000") }.to raise_error(ArgumentError, /port out of range/)
  end
end

RSpec.describe Evix::HTTP::AccessLog do
  it "writes a Common Log Format line" do
    env = { "REMOTE_ADDR" => "127.0.0.1", "REQUEST_METHOD" => "GET", "REQUEST_URI" => "/a?b",
            "SERVER_PROTOCOL" => "HTTP/1.1" }
    expect(described_class.line(env, 200, 5, Time.utc(2026, 1, 2, 3, 4, 5).to_f))
      .to eq("127.0.0.1 - - [02/Jan/2026:03:04:05 +0000] \"GET /a?b HTTP/1.1\" 200 5\n")
    expect(described_class.line(env.merge("REQUEST_URI" => "/\"x"), 500, nil,
                                0)).to include('"GET /\"x HTTP/1.1" 500 -')
  end
end

RSpec.describe "Evix::HTTP::Parser under GC pressure" do
  it "fills env correctly with the GC running at every allocation, and after compaction" do
    outcome = in_child(timeout: 60) do
      parser = Evix::HTTP::Parser.new(8192, 65_536, 100, 1_000_000, 1024)
      fields = Array.new(40) { |i| "X-Field-#{i}: value-#{i}\r\n" }.join
      head = "POST /p?q=1 HTTP/1.1\r\nHost: h\r\n#{fields}Cookie: a=1\r\nCookie: b=2\r\n\r\n"
      envs = []
      GC.stress = true
      begin
        3.times { envs << {}.tap { |env| parser.parse(head.dup, 0, env) } }
      ensure
        GC.stress = false
      end
      GC.compact if GC.respond_to?(:compact)
      envs << {}.tap { |env| parser.parse(head, 0, env) }
      envs.map { |env| [env.size, env["HTTP_X_FIELD_39"], env["HTTP_COOKIE"], env["PATH_INFO"]] }.uniq
    end
    expect(outcome).to eq([[47, "value-39", "a=1; b=2", "/p"]])
  end
end
