# frozen_string_literal: true

require "spec_helper"

RSpec.describe Evix::Loop do
  Evix.backends.each do |backend|
    describe "backend #{backend}" do
      it_behaves_like "an evix loop", backend
    end
  end

  describe "Evix.backends" do
    it "lists the available backends as Symbols" do
      expect(Evix.backends).to all(be_a(Symbol))
      expect(Evix.backends).to include(:poll)
    end

    it "includes epoll on Linux", if: RUBY_PLATFORM.include?("linux") do
      expect(Evix.backends).to eq(%i[epoll poll])
    end
  end

  describe "its Ruby half" do
    # One owner per class: no other file reopens Evix::Loop to add to it.
    it "is defined in one Ruby file, loop.rb" do
      paths = [Evix::Loop, Evix::Loop.singleton_class].flat_map do |klass|
        (klass.instance_methods(false) + klass.private_instance_methods(false)).filter_map do |name|
          klass.instance_method(name).source_location&.first
        end
      end
      expect(paths.map { |path| File.basename(path) }.uniq).to eq(["loop.rb"])
    end
  end

  # The kernel is what can count the loop's backend waits: a child under strace.
  describe "waiting in epoll", if: RUBY_PLATFORM.include?("linux") && system("command -v strace >/dev/null") do
    def epoll_waits(script)
      Dir.mktmpdir do |dir|
        trace = File.join(dir, "trace")
        ok = system({ "EVIX_BACKEND" => "epoll" }, "strace", "-f", "-qq", "-e", "trace=epoll_wait,epoll_pwait",
                    "-o", trace, RbConfig.ruby, "-I", File.expand_path("../../../lib", __dir__), "-e", script)
        expect(ok).to be(true)
        File.readlines(trace).grep(/epoll_p?wait\(/)
      end
    end

    def looks(calls) = calls.grep(/, 0\) += /)

    it "blocks without a non-blocking look first while each wait brings one event" do
      # One byte every 2 ms: the loop keeps up, so a look before each wait would find nothing.
      calls = epoll_waits(<<~RUBY)
        require "evix"
        loop = Evix::Loop.new
        r, w = IO.pipe
        got = 0
        loop.add_io(r, Evix::READ) { r.read_nonblock(1); got += 1; loop.stop if got == 30 }
        writer = Thread.new { 30.times { sleep 0.002; w.write("x") } }
        loop.run
        writer.join
        exit(got == 30 ? 0 : 1)
      RUBY
      expect(calls.size).to be >= 30
      expect(looks(calls).size).to be <= 3
    end

    it "looks before it blocks while events wait at every turn" do
      # Ten pipes that stay readable: every turn has ten events ready.
      calls = epoll_waits(<<~RUBY)
        require "evix"
        loop = Evix::Loop.new
        served = 0
        pipes = Array.new(10) { IO.pipe.tap { |_, w| w.write("x" * 100) } }
        pipes.each do |r, _|
          loop.add_io(r, Evix::READ) { r.read_nonblock(1); served += 1; loop.stop if served == 500 }
        end
        loop.run
        exit(served == 500 ? 0 : 1)
      RUBY
      expect(looks(calls).count { |line| line.match?(/= [1-9]/) }).to be >= 40
      expect((calls - looks(calls)).size).to be <= 2
    end
  end

  describe "backend selection" do
    around do |example|
      saved = ENV.fetch("EVIX_BACKEND", nil)
      begin
        example.run
      ensure
        ENV["EVIX_BACKEND"] = saved
      end
    end

    Evix.backends.each do |backend|
      it "creates a #{backend} loop when asked with a Symbol" do
        expect(new_loop(backend).backend).to eq(backend)
      end

      it "creates a #{backend} loop when asked with a String" do
        expect(new_loop(backend.to_s).backend).to eq(backend)
      end

      it "honours EVIX_BACKEND=#{backend}" do
        ENV["EVIX_BACKEND"] = backend.to_s
        expect(new_loop.backend).to eq(backend)
      end
    end

    it "uses epoll by default on Linux", if: RUBY_PLATFORM.include?("linux") do
      ENV.delete("EVIX_BACKEND")
      expect(new_loop.backend).to eq(:epoll)
    end

    it "treats backend: nil like no backend" do
      ENV.delete("EVIX_BACKEND")
      default = new_loop.backend
      explicit_nil = Evix::Loop.new(backend: nil)
      begin
        expect(explicit_nil.backend).to eq(default)
      ensure
        explicit_nil.close
      end
    end

    it "prefers an explicit backend over EVIX_BACKEND" do
      other = (Evix.backends - [:poll]).first || :poll
      ENV["EVIX_BACKEND"] = (Evix.backends - [other]).first.to_s
      expect(new_loop(other).backend).to eq(other)
    end

    it "rejects an unknown backend with an ArgumentError naming it" do
      expect { Evix::Loop.new(backend: :bogus) }.to raise_error(ArgumentError, /bogus/)
    end

    it "rejects an unknown EVIX_BACKEND with an ArgumentError naming it" do
      ENV["EVIX_BACKEND"] = "nonsense"
      expect { Evix::Loop.new }.to raise_error(ArgumentError, /nonsense/)
    end

    it "rejects a backend of the wrong type with a TypeError" do
      expect { Evix::Loop.new(backend: 42) }.to raise_error(TypeError)
    end
  end

  Evix.backends.each do |backend|
    describe "bad input (backend #{backend})" do
      let!(:ev) { new_loop(backend) }

      describe "#add_timer" do
        it "rejects a negative delay" do
          expect { ev.add_timer(-1) {} }.to raise_error(ArgumentError, /delay/)
        end

        it "rejects a NaN delay" do
          expect { ev.add_timer(Float::NAN) {} }.to raise_error(ArgumentError, /delay/)
        end

        it "rejects an infinite delay" do
          expect { ev.add_timer(Float::INFINITY) {} }.to raise_error(ArgumentError, /delay/)
        end

        it "rejects a String delay with a TypeError" do
          expect { ev.add_timer("1") {} }.to raise_error(TypeError)
        end

        it "rejects a nil delay with a TypeError" do
          expect { ev.add_timer(nil) {} }.to raise_error(TypeError)
        end

        it "rejects repeat: 0" do
          expect { ev.add_timer(1, repeat: 0) {} }.to raise_error(ArgumentError, /repeat/)
        end

        it "rejects a negative repeat" do
          expect { ev.add_timer(1, repeat: -0.5) {} }.to raise_error(ArgumentError, /repeat/)
        end

        it "rejects a NaN repeat" do
          expect { ev.add_timer(1, repeat: Float::NAN) {} }.to raise_error(ArgumentError, /repeat/)
        end

        it "rejects a String repeat with a TypeError" do
          expect { ev.add_timer(1, repeat: "1") {} }.to raise_error(TypeError)
        end

        it "requires a block" do
          expect { ev.add_timer(1) }.to raise_error(ArgumentError, /block/)
        end
      end

      describe "missing blocks" do
        it "requires a block for next_tick" do
          expect { ev.next_tick }.to raise_error(ArgumentError, /block/)
        end

        it "requires a block for defer" do
          expect { ev.defer }.to raise_error(ArgumentError, /block/)
        end

        it "requires a block for add_io" do
          r, = pipe
          expect { ev.add_io(r, Evix::READ) }.to raise_error(ArgumentError, /block/)
        end

        it "requires a block for post" do
          expect { ev.post }.to raise_error(ArgumentError, /block/)
        end
      end

      describe "#add_io events" do
        [8, 0, -1, Evix::ONESHOT, Evix::READ | 16].each do |events|
          it "rejects events=#{events}" do
            r, = pipe
            expect { ev.add_io(r, events) {} }.to raise_error(ArgumentError, /event/)
          end
        end
      end

      describe "#add_io events of the wrong type" do
        [["a String", "1"], ["nil", nil], ["a Symbol", :read]].each do |label, events|
          it "rejects #{label} with a TypeError" do
            r, = pipe
            expect { ev.add_io(r, events) {} }.to raise_error(TypeError)
          end
        end
      end

      describe "#add_io target" do
        [["a String", "foo"], ["a plain Object", Object.new], ["nil", nil], ["a Float", 1.5]].each do |label, target|
          it "rejects #{label} with a TypeError" do
            expect { ev.add_io(target, Evix::READ) {} }.to raise_error(TypeError)
          end
        end

        it "rejects a closed IO with Evix::ClosedError" do
          r, = pipe
          r.close
          expect { ev.add_io(r, Evix::READ) {} }.to raise_error(Evix::ClosedError)
        end

        it "rejects a negative fd with an ArgumentError" do
          expect { ev.add_io(-1, Evix::READ) {} }.to raise_error(ArgumentError)
        end

        it "rejects an fd that is not open with Errno::EBADF" do
          fd = unused_fd
          expect { ev.add_io(fd, Evix::READ) {} }.to raise_error(Errno::EBADF)
        end
      end

      describe "Timer#again" do
        it "rejects a negative delay" do
          timer = ev.add_timer(1) {}
          expect { timer.again(-1) }.to raise_error(ArgumentError, /delay/)
          expect(timer.active?).to be(true)
        end

        it "rejects a String delay with a TypeError" do
          timer = ev.add_timer(1) {}
          expect { timer.again("soon") }.to raise_error(TypeError)
        end
      end

      it "rejects an unknown run mode" do
        expect { ev.run(:sometimes) }.to raise_error(ArgumentError, /sometimes/)
        expect { ev.run(1) }.to raise_error(TypeError)
      end

      it "checks the arity of run, run_once, add_timer and Timer#again like Ruby methods" do
        given2 = "wrong number of arguments (given 2, expected 0..1)"
        expect { ev.run(:once, 1) }.to raise_error(ArgumentError, given2)
        expect { ev.run_once(1, 2) }.to raise_error(ArgumentError, given2)
        block = proc {}
        expect { ev.add_timer(1, 2, &block) }
          .to raise_error(ArgumentError, "wrong number of arguments (given 2, expected 1)")
        timer = ev.add_timer(1) {}
        expect { timer.again(1, 2) }.to raise_error(ArgumentError, given2)
        expect(ev.stats[:timers]).to eq(1)
      end

      it "takes repeat: only as a keyword and rejects unknown keywords" do
        expect { ev.add_timer(1, { repeat: 1 }) {} }
          .to raise_error(ArgumentError, "wrong number of arguments (given 2, expected 1)")
        expect { ev.add_timer(1, foo: 1) {} }.to raise_error(ArgumentError, "unknown keyword: :foo")
        expect(ev.stats[:timers]).to eq(0)
      end

      it "loses nothing when add_io fails", timing: true do
        r, w = pipe
        got = []
        watcher = ev.add_io(r, Evix::READ) do |events|
          got << events
          watcher.cancel
        end
        expect { ev.add_io(unused_fd, Evix::READ) {} }.to raise_error(Errno::EBADF)
        expect { ev.add_io(r, 99) {} }.to raise_error(ArgumentError)
        expect(ev.stats[:watchers]).to eq(1)
        w.write("x")
        expect(elapsed { ev.run }).to be < 1
        expect(got).to eq([Evix::READ])
      end

      it "loses nothing when add_timer fails" do
        log = []
        ev.add_timer(0.01) { log << :kept }
        expect { ev.add_timer(-1) { log << :rejected } }.to raise_error(ArgumentError)
        expect { ev.add_timer(1, repeat: 0) { log << :rejected } }.to raise_error(ArgumentError)
        expect(ev.stats[:timers]).to eq(1)
        ev.run
        expect(log).to eq([:kept])
      end

      describe "a closed loop" do
        before { ev.close }

        {
          "next_tick" => ->(ev, _io) { ev.next_tick {} },
          "defer" => ->(ev, _io) { ev.defer {} },
          "add_timer" => ->(ev, _io) { ev.add_timer(1) {} },
          "add_io" => ->(ev, io) { ev.add_io(io, Evix::READ) {} },
          "post" => ->(ev, _io) { ev.post {} },
          "run" => ->(ev, _io) { ev.run },
          "run_once" => ->(ev, _io) { ev.run_once(0) },
          "stop" => ->(ev, _io) { ev.stop },
          "alive?" => ->(ev, _io) { ev.alive? },
          "stats" => ->(ev, _io) { ev.stats },
          "backend" => ->(ev, _io) { ev.backend }
        }.each do |name, call|
          it "raises Evix::ClosedError from #{name}" do
            r, = pipe
            expect { call.call(ev, r) }.to raise_error(Evix::ClosedError)
          end
        end

        it "ignores wakeup" do
          expect(ev.wakeup).to be_nil
        end

        it "is closed? and can be closed again" do
          expect(ev.closed?).to be(true)
          expect(ev.close).to be_nil
          expect(ev.closed?).to be(true)
        end
      end

      describe "re-entry" do
        {
          "run" => ->(ev) { ev.run },
          "run(:nowait)" => ->(ev) { ev.run(:nowait) },
          "run_once" => ->(ev) { ev.run_once(0) }
        }.each do |name, call|
          it "raises Evix::Error when #{name} is called from a callback" do
            inner = nil
            ev.next_tick do
              call.call(ev)
            rescue Evix::Error => e
              inner = e
            end
            ev.run
            expect(inner).to be_a(Evix::Error)
            ran = false
            ev.next_tick { ran = true }
            ev.run
            expect(ran).to be(true)
          end
        end

        it "raises Evix::Error when close is called from a callback and stays open" do
          inner = nil
          ev.add_timer(0) do
            ev.close
          rescue Evix::Error => e
            inner = e
          end
          ev.run
          expect(inner).to be_a(Evix::Error)
          expect(inner).not_to be_a(Evix::ClosedError)
          expect(ev.closed?).to be(false)
          ran = false
          ev.next_tick { ran = true }
          ev.run
          expect(ran).to be(true)
        end
      end
    end
  end
end
