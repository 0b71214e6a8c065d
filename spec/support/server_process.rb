# frozen_string_literal: true

require "rbconfig"
require "socket"
require "tempfile"
require_relative "line_socket"

# A server in a Ruby process of its own (lib/ on its load path), for specs
# that drive it from outside as its users would: its first line on stdout
# says it is ready and on which port; what it writes to stderr is kept in a
# file for the failure messages.
class ServerProcess
  ROOT = File.expand_path("../..", __dir__)
  LIB = File.join(ROOT, "lib")

  attr_reader :pid, :port, :banner

  # Runs the block with a started server; kills it afterwards, whatever happens.
  def self.run(...)
    server = new(...)
    yield server
  ensure
    server&.stop
  end

  # Starts `ruby -I lib *args` (with +env+ added to its environment) and waits
  # for a first line that matches +ready+, whose first capture is the port.
  # With +pgroup+ the server gets a process group of its own, and #stop kills
  # that group: nothing it forked outlives the example.
  def initialize(name, args, ready:, env: {}, chdir: ROOT, pgroup: false, ready_timeout: 10)
    @name = name
    @pgroup = pgroup
    @clients = []
    @stderr = Tempfile.new(["evix-server", ".err"])
    @stdout, child_stdout = IO.pipe
    @pid = Process.spawn(env, RbConfig.ruby, "-I", LIB, *args,
                         in: File::NULL, out: child_stdout, err: @stderr.path, chdir: chdir, pgroup: pgroup)
    child_stdout.close
    @banner = LineSocket.new(@stdout).gets(timeout: ready_timeout)
    @port = Integer(ready.match(@banner.to_s)&.[](1) || raise("#{name} did not start: #{@banner.inspect}\n#{stderr}"))
  rescue StandardError
    stop
    raise
  end

  # A new client connection to the server (closed by #stop). With +rcvbuf+,
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

  # Waits for the server to exit; fails after +timeout+ (#stop kills it).
  # @return [Process::Status]
  def wait(timeout: 10)
    deadline = LineSocket.now + timeout
    until (done = Process.wait2(pid, Process::WNOHANG))
      raise "#{@name} (pid #{pid}) still runs after #{timeout}s\n#{stderr}" if LineSocket.now > deadline

      sleep 0.01
    end
    @status = done[1]
  end

  # Whatever the server wrote to stderr so far.
  def stderr
    File.read(@stderr.path)
  end

  # Closes the clients, kills the server (and its process group) if need be
  # and reaps it. Idempotent.
  def stop
    @clients.each { |socket| socket.close unless socket.closed? }
    if @pid
      kill
      @status ||= Process.wait2(pid)[1]
    end
    @stdout&.close unless @stdout&.closed?
    @stderr&.close!
  end

  private

  # Kills the server unless it was reaped already, and its process group in
  # any case: workers can outlive their parent.
  def kill
    Process.kill(:KILL, @pgroup ? -pid : pid) if @pgroup || !@status
  rescue Errno::ESRCH
    nil # exited, not reaped yet (or its group is empty)
  end
end
