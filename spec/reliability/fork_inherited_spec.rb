# frozen_string_literal: true

require "spec_helper"
require "timeout"

# A child forked inside Evix.run keeps the parent's scheduler (Ruby cannot
# unset it) but must not use its loop: its hooks block the child's thread,
# as Ruby does without a scheduler.
RSpec.describe "A child forked inside Evix.run" do
  it "reads a pipe that must wait, runs Timeout, waits for its own child and schedules a fiber" do
    report = in_child(timeout: 8) do
      Evix.run do
        reader, writer = IO.pipe
        pid = fork do
          reader.close
          results = []
          attempt = lambda do |&block|
            results << block.call
          rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
            results << "#{e.class}: #{e.message[0, 100]}"
          end
          pipe_r, pipe_w = IO.pipe
          Thread.new do
            sleep 0.05
            pipe_w.write("x")
          end
          attempt.call { pipe_r.read(1) }
          attempt.call { Timeout.timeout(1) { sleep(0.01) && :in_time } }
          attempt.call { Process.wait(fork { exit!(3) }) && $CHILD_STATUS.exitstatus }
          attempt.call { Fiber.schedule { :x } && :scheduled }
          writer.write(Marshal.dump(results))
          exit!(0)
        end
        writer.close
        Process.wait(pid)
        [$CHILD_STATUS.exitstatus, Marshal.load(reader.read)] # rubocop:disable Security/MarshalLoad -- our child
      end
    end
    expect(report).to eq([0, ["x", :in_time, 3, :scheduled]])
  end
end
