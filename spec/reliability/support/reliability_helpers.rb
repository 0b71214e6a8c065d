# frozen_string_literal: true

require "io/wait"
require "socket"
require "tempfile"

# Helpers for spec/reliability (on top of spec_helper's EvixSpecHelpers).
module ReliabilityHelpers
  # Whether rake spec:gc_stress runs this (GC.stress on: everything is far slower).
  def gc_stress?
    value = ENV.fetch("EVIX_GC_STRESS", "")
    !(value.empty? || value == "0")
  end

  # +count+, or +stressed+ under GC.stress, for loops whose size is not the point.
  def scaled(count, stressed)
    gc_stress? ? stressed : count
  end

  # Runs the loop until the block returns truthy; fails after +timeout+.
  def run_until(evloop, timeout: 5, slice: 0.01)
    deadline = now + timeout
    until (result = yield)
      raise RSpec::Expectations::ExpectationNotMetError, "condition not met within #{timeout}s" if now > deadline

      evloop.run_once(slice)
    end
    result
  end

  # Runs the loop for about +seconds+.
  def run_for(evloop, seconds)
    deadline = now + seconds
    evloop.run_once([deadline - now, 0].max) while now < deadline
  end

  # A blocking TCP client (tracked: the after hook closes it).
  def tcp_client(port, host = "127.0.0.1", rcvbuf: nil, sndbuf: nil)
    address = Addrinfo.tcp(host, port)
    socket = Socket.new(address.afamily, :STREAM)
    track_io(socket)
    socket.setsockopt(:SOCKET, :RCVBUF, rcvbuf) if rcvbuf
    socket.setsockopt(:SOCKET, :SNDBUF, sndbuf) if sndbuf
    socket.connect(address)
    socket
  end

  # Reads what a socket has without blocking: :eof at end of file (or reset).
  def drain(socket, into)
    loop do
      chunk = socket.read_nonblock(65_536, exception: false)
      return :eof if chunk.nil?
      return :open if chunk == :wait_readable

      into << chunk
    end
  rescue Errno::ECONNRESET
    :eof
  end

  # Makes the next close of +socket+ send RST instead of FIN.
  def abortive(socket)
    socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
    socket
  end

  def cpu_time
    Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  end

  # Resident set size of +pid+ in KiB.
  def rss_kib(pid = Process.pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i
  end

  # Moves as many objects as the running Ruby can.
  def compact_heap
    if GC.respond_to?(:verify_compaction_references)
      GC.verify_compaction_references(double_heap: true, toward: :empty)
    elsif GC.respond_to?(:compact)
      GC.compact
    else
      GC.start
    end
  end

  # Objects nothing but a closure references any more, spread over the heap
  # so that compaction has something to move.
  def churn(count = 5_000)
    Array.new(count) { |i| "churn-#{i}" }.each_slice(7).map(&:join)
    nil
  end

  # Forks a child that runs the block with a +report+ lambda (one line to the
  # parent per call) and leaves with exit! (0, or 1 if the block raised).
  # Returns [pid, reader]: the reader yields the reported lines.
  def fork_child
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      report = lambda do |line|
        writer.write("#{line}\n")
        writer.flush
      end
      code = 0
      begin
        $stderr = File.open(File::NULL, "w") unless ENV["EVIX_SPEC_CHILD_STDERR"]
        yield report
      rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
        report.call("child failed: #{e.class}: #{e.message} #{e.backtrace&.first(3)&.join(" | ")}")
        code = 1
      ensure
        exit!(code)
      end
    end
    writer.close
    track_io(reader)
    (@reliability_children ||= []) << pid
    [pid, reader]
  end

  # The next line a child reported, or a failure after +timeout+.
  def child_line(reader, timeout: 5)
    raise RSpec::Expectations::ExpectationNotMetError, "the child reported nothing within #{timeout}s" \
      unless reader.wait_readable(timeout)

    line = reader.gets
    raise RSpec::Expectations::ExpectationNotMetError, "the child closed its report pipe" unless line
    raise RSpec::Expectations::ExpectationNotMetError, line.chomp if line.start_with?("child failed:")

    line.chomp
  end

  # Runs the block in a forked child and returns its value (Marshal-able), or
  # raises the child's exception. A child that crashes (a GC bug is a
  # segfault or an abort, not an exception) fails the example with its
  # signal and the head of its stderr instead of taking the suite down.
  # (A named block: Ruby 3.1.2 cannot forward an anonymous one next to keywords.)
  def isolated(timeout: 8, &block)
    reader, writer = IO.pipe
    stderr = Tempfile.new("evix-isolated")
    pid = fork_isolated(reader, writer, stderr.path, &block)
    writer.close
    data = read_with_deadline(reader, gc_stress? ? timeout * 20 : timeout)
    status = wait_child(pid, timeout: 1)
    if status.signaled? || !status.success? || data.empty?
      raise RSpec::Expectations::ExpectationNotMetError,
            "isolated child died (#{status.inspect}); its stderr began:\n#{File.read(stderr.path)[0, 1500]}"
    end
    isolated_outcome(data)
  ensure
    reader&.close
    stderr&.close!
  end

  def fork_isolated(reader, writer, stderr_path)
    fork do
      reader.close
      $stderr.reopen(stderr_path, "w")
      outcome = begin
        [:value, yield]
      rescue Exception => e # rubocop:disable Lint/RescueException -- handed to the parent
        [:error, e.class.name, e.message, e.backtrace&.first(8)]
      end
      writer.write(Marshal.dump(outcome))
      writer.close
      exit!(0)
    end
  end

  def isolated_outcome(data)
    kind, *rest = Marshal.load(data) # rubocop:disable Security/MarshalLoad -- our own child
    return rest.first unless kind == :error

    raise RSpec::Expectations::ExpectationNotMetError,
          "isolated child raised #{rest[0]}: #{rest[1]}\n  #{Array(rest[2]).join("\n  ")}"
  end

  def read_with_deadline(reader, timeout)
    data = String.new(encoding: Encoding::BINARY)
    deadline = now + timeout
    while (left = deadline - now).positive?
      break unless reader.wait_readable(left)

      chunk = reader.read_nonblock(65_536, exception: false)
      break if chunk.nil?

      data << chunk unless chunk == :wait_readable
    end
    data
  end

  # Kills whatever child of this example is still running.
  def reap_children
    (@reliability_children || []).each do |pid|
      next if Process.wait2(pid, Process::WNOHANG) # it had exited: reaped now

      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil # reaped already
    end
  end
end

RSpec.configure do |config|
  config.include ReliabilityHelpers, file_path: %r{spec/reliability/}
  config.after(file_path: %r{spec/reliability/}) { reap_children }
end
