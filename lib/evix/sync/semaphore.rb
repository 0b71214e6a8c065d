# frozen_string_literal: true

module Evix
  # Lets at most +limit+ tasks of a loop hold it at once; the others wait
  # in the order they came (FIFO). A waiter that is cancelled leaves the
  # queue.
  #
  #   semaphore = Evix::Semaphore.new(4)
  #   urls.each { |url| loop.spawn { semaphore.acquire { fetch(url) } } }
  class Semaphore
    # @return [Integer] how many tasks may hold it at once
    attr_reader :limit

    # @return [Integer] how many hold it now
    attr_reader :count

    # @param limit [Integer] how many tasks may hold it at once (1 or more)
    # @raise [ArgumentError] for a limit that is not a positive Integer
    def initialize(limit)
      unless limit.is_a?(Integer) && limit.positive?
        raise ArgumentError, "limit must be a positive Integer, got #{limit.inspect}"
      end

      @limit = limit
      @count = 0
      @waiters = WaitList.new("Evix::Semaphore#acquire")
    end

    # @return [Boolean] whether #acquire would return without waiting
    def available?
      @count < @limit && @waiters.empty?
    end

    # Takes a place, waiting (only the calling task) while +limit+ tasks
    # hold it. With a block: runs it, releases even when it raises, and
    # returns its value; without: the caller must #release.
    # @yieldreturn [Object]
    # @return [Object] the block's value, or nil without a block
    # @raise [Evix::Error] when it must wait outside a task
    def acquire
      if available?
        @count += 1
      else
        @waiters.wait # #release handed its place over: @count is unchanged
      end
      return unless block_given?

      begin
        yield
      ensure
        release
      end
    end

    # Gives a place back: to the task that has waited longest, if any.
    # @return [nil]
    # @raise [Evix::Error] if nothing is held
    def release
      raise Error, "Evix::Semaphore#release without a matching acquire" if @count.zero?

      @count -= 1 unless @waiters.wake(true)
      nil
    end
  end
end
