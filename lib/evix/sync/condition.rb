# frozen_string_literal: true

module Evix
  # Lets tasks of a loop wait until another one signals, with a value.
  # A signal is not remembered: it wakes only tasks already waiting.
  #
  #   condition = Evix::Condition.new
  #   loop.spawn { puts condition.wait }        # => "ready"
  #   loop.spawn { condition.signal("ready") }
  class Condition
    # A condition nobody waits on yet.
    def initialize
      @waiters = WaitList.new("Evix::Condition#wait")
    end

    # Waits until #signal or #broadcast wakes the calling task. Only the
    # task waits; the loop keeps running the others.
    # @param timeout [Numeric, nil] seconds to wait at most
    # @return [Object] the value given to #signal / #broadcast, nil on timeout
    # @raise [Evix::Error] outside a task
    def wait(timeout: nil)
      @waiters.wait(timeout)
    end

    # Wakes the task that has waited longest.
    # @param value [Object] what its #wait returns
    # @return [Boolean] whether a task was waiting
    def signal(value = nil)
      @waiters.wake(value)
    end

    # Wakes every waiting task.
    # @param value [Object] what each #wait returns
    # @return [Integer] how many tasks were woken
    def broadcast(value = nil)
      @waiters.wake_all(value)
    end

    # @return [Boolean] whether a task is waiting (a waiter cancelled a
    #   moment ago counts until it has unwound, or a signal skipped it)
    def waiting?
      !@waiters.empty?
    end
  end
end
