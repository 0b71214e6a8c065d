# frozen_string_literal: true

require_relative "server_process"

# One `exe/evix NAME --port 0 ...` child process, for the examples' specs.
class ExampleProcess < ServerProcess
  EXE = File.join(ROOT, "exe", "evix")

  # Starts the child and waits for its "listening on" line.
  def initialize(name, *args, **options)
    super("evix #{name}", [EXE, name, "--port", "0", *args], ready: /listening on .*:(\d+)\z/, **options)
  end
end
