# frozen_string_literal: true

require "spec_helper"
require "open3"
require "tmpdir"

# Errors that say where: a server's default on_error prints the exception
# with its first frames (evix's own folded), an exception out of Evix.run
# reads from the user's frames down to the call of Evix.run, and Ctrl-C is
# reported at the user's line, as Ruby reports it without evix. Each runs in
# a real process, and the Interrupt is a real SIGINT.
RSpec.describe Evix::Backtrace do
  lib = File.expand_path("../../lib", __dir__)
  evix_frame = File.join(lib, "evix", "task.rb:35:in `block in initialize'")

  # Runs +script+ (a file, so that frames have lines) in a new Ruby; when
  # +interrupt+, sends SIGINT once it printed "ready". Returns [status, stdout, stderr].
  def run_script(script, interrupt: false, timeout: 10)
    Dir.mktmpdir("evix-backtrace") do |dir|
      File.write(File.join(dir, "app.rb"), script)
      Open3.popen3(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "app.rb",
                   chdir: dir) do |input, out, err, thread|
        input.close
        if interrupt
          raise "the script never got ready: #{err.read}" unless out.wait_readable(timeout) && out.gets == "ready\n"

          sleep 0.5 # from puts into sleep
          Process.kill(:INT, thread.pid)
        end
        unless thread.join(timeout)
          Process.kill(:KILL, thread.pid)
          raise "the script did not end within #{timeout}s"
        end
        [thread.value, out.read, err.read]
      end
    end
  end

  # Ruby 3.4 quotes frames as 'Kernel#sleep' where 3.1 wrote `sleep': the
  # 3.1 form, so that one expectation holds on each.
  def normalize(text)
    text.gsub(/[`']/, "'").gsub(/'(?:[\w:]+[#.])(\S+)'/, "'\\1'").gsub("'", "`").gsub(/`([^`]*)`/, "`\\1'")
  end

  describe ".fold" do
    it "keeps the first frame and the user's, and folds each run of evix's frames into one line" do
      raised = ["#{lib}/evix/io/io.rb:10:in `wait'", "#{lib}/evix/io/io_input.rb:20:in `read'"]
      frames = [*raised, "app.rb:3:in `serve'", "#{lib}/evix/net/server.rb:9:in `serve'", evix_frame,
                "app.rb:9:in `<main>'"]
      expect(described_class.fold(frames))
        .to eq([*raised, "app.rb:3:in `serve'", "... 2 frames of evix", "app.rb:9:in `<main>'"])
    end

    it "keeps every frame with EVIX_BACKTRACE=full" do
      frames = ["app.rb:3:in `x'", "#{lib}/evix/net/server.rb:9:in `serve'", evix_frame]
      ENV["EVIX_BACKTRACE"] = "full"
      expect(described_class.fold(frames)).to eq(frames)
    ensure
      ENV.delete("EVIX_BACKTRACE")
    end
  end

  describe ".report" do
    it "is the class, the message and at most the first frames, with how many more there were" do
      error = RuntimeError.new("boom")
      error.set_backtrace((1..20).map { |n| "app.rb:#{n}:in `f#{n}'" })
      lines = described_class.report(error, frames: 3).lines(chomp: true)
      expect(lines).to eq(["RuntimeError: boom", "\tfrom app.rb:1:in `f1'", "\tfrom app.rb:2:in `f2'",
                           "\tfrom app.rb:3:in `f3'", "\t... 17 more"])
    end
  end

  it "a server's default on_error prints the handler's exception with its file and line, evix's frames folded" do
    status, out, err = run_script(<<~RUBY)
      require "evix"
      loop = Evix::Loop.new
      server = Evix::TCPServer.new(loop, "127.0.0.1", 0) do |client|
        line = client.gets
        client.write(line.upcasee)
      end
      loop.spawn do
        client = Evix::TCPClient.connect(loop, "127.0.0.1", server.port, timeout: 5)
        client.write("hi\\n")
        puts client.read.inspect
        server.close
      end
      loop.run
    RUBY
    err = normalize(err)
    expect(status).to be_success
    expect(out).to eq("nil\n")
    expect(err).to start_with("evix: connection error: NoMethodError: undefined method `upcasee'")
    expect(err).to include("\tfrom app.rb:5:in `block in <main>'\n\tfrom ... ")
    expect(err).to match(/^\tfrom \.\.\. \d+ frames of evix$/)
    expect(err).not_to include(lib)
  end

  it "an exception out of Evix.run reads from the user's frames down to the line that called Evix.run" do
    status, _out, err = run_script(<<~RUBY)
      require "evix"
      def work
        raise ArgumentError, "boom"
      end
      Evix.run do
        Fiber.schedule { sleep 0.01; work }
        sleep 1
      end
    RUBY
    expect(status.exitstatus).to eq(1)
    lines = normalize(err).lines(chomp: true)
    expect(lines.first).to eq("app.rb:3:in `work': boom (ArgumentError)")
    # Ruby 3.4's error_highlight shows the line's code between message and frames.
    expect(lines.grep(/\A\t/)).to eq(["\tfrom app.rb:6:in `block (2 levels) in <main>'", "\tfrom ... 2 frames of evix",
                                      "\tfrom app.rb:5:in `<main>'"])
  end

  it "Ctrl-C (a real SIGINT) out of Evix.run is reported at the user's line, as Ruby reports it without evix" do
    waits = <<~RUBY
      $stdout.sync = true
      def wait_here
        puts "ready"
        sleep
      end
    RUBY
    plain = run_script("#{waits}wait_here\n", interrupt: true)
    status, _out, err = run_script("require \"evix\"\n#{waits}Evix.run do\n  wait_here\nend\n", interrupt: true)
    expect(plain[0].termsig).to eq(Signal.list.fetch("INT"))
    expect(status.termsig).to eq(Signal.list.fetch("INT"))
    expect(normalize(plain[2]).lines(chomp: true))
      .to eq(["app.rb:4:in `sleep': Interrupt", "\tfrom app.rb:4:in `wait_here'", "\tfrom app.rb:6:in `<main>'"])
    expect(normalize(err).lines(chomp: true))
      .to eq(["app.rb:5:in `sleep': Interrupt", "\tfrom app.rb:5:in `wait_here'",
              "\tfrom app.rb:8:in `block in <main>'", "\tfrom app.rb:7:in `<main>'"])
  end
end
