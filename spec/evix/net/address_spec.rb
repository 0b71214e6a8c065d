# frozen_string_literal: true

require "spec_helper"

# Where servers listen and clients connect, checked before any socket is made
# (the servers' and clients' own specs check the same messages through them).
RSpec.describe Evix::Net::Address do
  it ".check_host takes a String or nil (every address), and refuses anything else" do
    expect(described_class.check_host("::1")).to eq("::1")
    expect(described_class.check_host(nil)).to be_nil
    expect { described_class.check_host(:localhost) }
      .to raise_error(TypeError, "host must be a String or nil (got :localhost)")
    expect { described_class.check_host("") }.to raise_error(ArgumentError, /host must not be empty/)
  end

  it ".check_peer_host takes a non-empty String only" do
    expect(described_class.check_peer_host("127.0.0.1")).to eq("127.0.0.1")
    expect { described_class.check_peer_host(nil) }.to raise_error(TypeError, "host must be a String (got nil)")
    expect { described_class.check_peer_host("") }.to raise_error(ArgumentError, "host must not be empty")
  end

  it ".check_port takes 0 to 65535" do
    expect(described_class.check_port(0)).to eq(0)
    expect(described_class.check_port(65_535)).to eq(65_535)
    expect { described_class.check_port(nil) }.to raise_error(ArgumentError, /a port is needed/)
    expect { described_class.check_port(-1) }
      .to raise_error(ArgumentError, "port must be between 0 and 65535 (got -1)")
    expect { described_class.check_port(65_536) }
      .to raise_error(ArgumentError, "port must be between 0 and 65535 (got 65536)")
    expect { described_class.check_port(80.0) }.to raise_error(TypeError, "port must be an Integer (got 80.0)")
  end

  it ".check_path takes a String or #to_path that fits sun_path" do
    expect(described_class.check_path(Pathname("/tmp/a.sock"))).to eq("/tmp/a.sock")
    expect { described_class.check_path(1) }
      .to raise_error(TypeError, "path must be a String or respond to #to_path (got 1)")
    expect { described_class.check_path("") }.to raise_error(ArgumentError, "path must not be empty")
    expect { described_class.check_path("a\0b") }.to raise_error(ArgumentError, /NUL byte/)
    expect { described_class.check_path("/tmp/#{"x" * 200}") }.to raise_error(ArgumentError, /too long/)
  end
end
