# frozen_string_literal: true

require "rbconfig"
require "io/wait"
require "socket"
require "tempfile"

# One `exe/evix NAME --port 0 ...` child process, for the examples' specs.
class ExampleProcess
  ROOT = File.expand_path("../../..", __dir__)
  EXE = File.join(ROOT, "exe", "evix")

  attr_reader :pid, :port, :banner

  # Starts the child (with +env+ added to its environment) and waits for its
  # "listening on" line.
  def initialize(name, *args, chdir: ROOT, env: {}, ready_timeout: 10)
    @stderr = Tempfile.new(["evix-#{name}", ".err"])
    @stdout, child_stdout = IO.pipe
    @pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), EXE, name, "--port", "0", *args,
                         in: File::NULL, out: child_stdout, err: @stderr.path, chdir: chdir)
    child_stdout.close
    @clients = []
    @banner = LineSocket.new(@stdout).gets(timeout: ready_timeout)
    raise "evix #{name} did not start: #{@banner.inspect}\n#{stderr}" unless @banner =~ /listening on .*:(\d+)\z/

    @port = Integer(Regexp.last_match(1))
  rescue StandardError
    stop
    raise
  end

  # Runs the block with a started child; kills the child afterwards, whatever happens.
  def self.run(name, *args, **options)
    child = new(name, *args, **options)
    yield child
  ensure
    child&.stop
  end

  # A new client connection to the child (closed by #stop). With +rcvbuf+,
  # the socket's receive buffer is set that small before connecting.
  # @return [LineSocket]
  def connect(rcvbuf: nil)
    socket = Socket.new(:INET, :STREAM)
    @clients << socket
    socket.setsockopt(:SOCKET, :RCVBUF, rcvbuf) if rcvbuf
    socket.connect(Socket.sockaddr_in(port, "127.0.0.1"))
    LineSocket.new(socket)
  end

  def signal(name)
    Process.kill(name, pid)
  end

  # Waits for the child to exit; kills it and fails after +timeout+.
  # @return [Process::Status]
  def wait(timeout: 5)
    deadline = LineSocket.now + timeout
    until (done = Process.wait2(pid, Process::WNOHANG))
      raise "evix child #{pid} still running after #{timeout}s" if LineSocket.now > deadline

      sleep 0.01
    end
    @status = done[1]
  end

  # Whatever the child wrote to stderr so far.
  def stderr
    File.read(@stderr.path)
  end

  # Kills the child if it still runs and reaps it. Idempotent.
  def stop
    @clients&.each { |socket| socket.close unless socket.closed? }
    kill if @pid && !@status
    @stdout&.close unless @stdout&.closed?
    @stderr&.close!
  end

  private

  def kill
    Process.kill(:KILL, pid)
  rescue Errno::ESRCH
    nil # exited, not reaped yet
  ensure
    @status = Process.wait2(pid)[1]
  end
end

# A line-oriented client on a plain socket; every read waits at most a timeout.
class LineSocket
  # Raised when no line arrives in time.
  class Timeout < StandardError; end

  attr_reader :io

  def self.now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def initialize(io)
    @io = io
    @buffer = String.new(encoding: Encoding::BINARY)
  end

  def puts(line)
    @io.write("#{line}\n")
  end

  # The next line without its newline; nil at end of file. Raises after +timeout+.
  def gets(timeout: 2)
    deadline = LineSocket.now + timeout
    until (index = @buffer.index("\n"))
      return (@buffer.empty? ? nil : @buffer.slice!(0..)) unless fill(deadline)
    end
    @buffer.slice!(0..index).chomp
  end

  # Every line until end of file.
  def lines_until_eof(timeout: 5)
    lines = []
    while (line = gets(timeout: timeout))
      lines << line
    end
    lines
  end

  # True if nothing arrives within +timeout+ (what does arrive stays buffered).
  def quiet?(timeout: 0.2)
    return false unless @buffer.empty?

    fill(LineSocket.now + timeout)
    false
  rescue Timeout
    true
  end

  def close
    @io.close unless @io.closed?
  end

  private

  # Reads more into the buffer; false at end of file.
  def fill(deadline)
    loop do
      remaining = deadline - LineSocket.now
      raise Timeout, "no line in time (buffered: #{@buffer[0, 200].inspect})" if remaining <= 0
      next unless @io.wait_readable(remaining)

      chunk = @io.read_nonblock(64 * 1024, exception: false)
      next if chunk == :wait_readable
      return false if chunk.nil?

      @buffer << chunk
      return true
    end
  rescue Errno::ECONNRESET
    false
  end
end
