# frozen_string_literal: true

require "spec_helper"

# The listeners Evix::TCPServer and Evix::Workers open or adopt, on loopback.
RSpec.describe Evix::Net::Listener do
  # Whether a plain connect to host:port is accepted by +listener+.
  def accepts?(listener, host, port)
    client = Socket.tcp(host, port, connect_timeout: 2)
    peer, = listener.accept
    peer.close
    true
  ensure
    client&.close
  end

  def ipv6_loopback?
    ::TCPServer.new("::1", 0).close
    true
  rescue SystemCallError, SocketError
    false
  end

  describe ".open_tcp" do
    it "listens on one host, with the backlog and SO_REUSEPORT asked for" do
      listener = described_class.open_tcp("127.0.0.1", 0, backlog: 4, reuse_port: true)
      expect(listener.getsockopt(:SOCKET, :ACCEPTCONN).bool).to be(true)
      expect(listener.getsockopt(:SOCKET, :REUSEPORT).bool).to be(true)
      expect(accepts?(listener, "127.0.0.1", listener.local_address.ip_port)).to be(true)
    ensure
      listener&.close
    end

    it "with host nil, takes IPv4 and IPv6 on one socket" do
      listener = described_class.open_tcp(nil, 0, backlog: 4)
      port = listener.local_address.ip_port
      expect(accepts?(listener, "127.0.0.1", port)).to be(true)
      expect(accepts?(listener, "::1", port)).to be(true) if ipv6_loopback?
    ensure
      listener&.close
    end

    it "names host and port when the host does not resolve, and leaves nothing open" do
      before = fd_count
      expect { described_class.open_tcp("a..b", 7000, backlog: 4) }
        .to raise_error(SocketError, /\Aa\.\.b:7000: /)
      expect(fd_count).to eq(before)
    end
  end

  describe ".check_listening" do
    it "takes a listening socket with no port, and refuses a port or a socket that does not listen" do
      listening = ::TCPServer.new("127.0.0.1", 0)
      idle = Socket.new(:INET, :STREAM)
      expect(described_class.check_listening(listening, nil)).to equal(listening)
      expect { described_class.check_listening(listening, 80) }
        .to raise_error(ArgumentError, "pass no port with a listening socket (got 80)")
      expect { described_class.check_listening(idle, nil) }.to raise_error(ArgumentError, /not listening/)
    ensure
      listening&.close
      idle&.close
    end
  end

  describe ".check_backlog" do
    it "takes a positive Integer and refuses anything else, showing it" do
      expect(described_class.check_backlog(1)).to eq(1)
      expect { described_class.check_backlog(0) }.to raise_error(ArgumentError, "backlog must be positive (got 0)")
      expect { described_class.check_backlog(1.5) }
        .to raise_error(TypeError, "backlog must be an Integer (got 1.5)")
    end
  end
end
