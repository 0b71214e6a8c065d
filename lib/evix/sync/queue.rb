# frozen_string_literal: true

module Evix
  # A FIFO of items between tasks of a loop, unbounded or bounded. #pop
  # waits (only the calling task) while it is empty, #push while a bounded
  # queue is full; waiters are served in the order they came. An item goes
  # straight to a waiting popper, and once a popper has been handed an item
  # it gets it, even if it is cancelled right after: no item is lost.
  #
  #   queue = Evix::Queue.new(10)
  #   loop.spawn { while (line = io.gets) do queue << line end; queue.close }
  #   loop.spawn { while (line = queue.pop) do handle(line) end }
  class Queue
    # @return [Integer, nil] the most items it holds, nil if unbounded
    attr_reader :limit

    # @param limit [Integer, nil] the most items it holds (1 or more);
    #   nil: unbounded
    # @raise [ArgumentError] for a limit that is not nil or a positive Integer
    def initialize(limit = nil)
      unless limit.nil? || (limit.is_a?(Integer) && limit.positive?)
        raise ArgumentError, "limit must be nil or a positive Integer, got #{limit.inspect}"
      end

      @limit = limit
      @items = []
      @closed = false
      @poppers = WaitList.new("Evix::Queue#pop")
      @pushers = WaitList.new("Evix::Queue#push")
    end

    # Adds +item+ at the end: to the popper that has waited longest if one
    # waits; when a bounded queue is full, the calling task waits for room.
    # @param item [Object]
    # @return [self]
    # @raise [Evix::ClosedError] if the queue is closed, or is closed while
    #   the task waits
    # @raise [Evix::Error] when it must wait outside a task
    def push(item)
      raise ClosedError, "Evix::Queue is closed" if @closed
      return self if @poppers.wake(item)

      if @limit && @items.size >= @limit
        # A popper moves the item in (see #refill) before it wakes us.
        raise ClosedError, "Evix::Queue was closed while waiting to push" if @pushers.wait(nil, item) == :closed
      else
        @items << item
      end
      self
    end
    alias << push

    # Takes the first item, waiting for one while the queue is empty. After
    # #close it returns what is left, then nil without waiting.
    # @param timeout [Numeric, nil] seconds to wait at most
    # @return [Object, nil] the item; nil on timeout or once closed and empty
    # @raise [Evix::Error] when it must wait outside a task
    def pop(timeout: nil)
      unless @items.empty?
        @pushers.check_local # #refill wakes one: raise before the item is taken
        item = @items.shift
        refill
        return item
      end
      return nil if @closed

      @poppers.wait(timeout)
    end

    # @return [Integer] items in the queue
    def size
      @items.size
    end

    # @return [Boolean] whether it holds no item
    def empty?
      @items.empty?
    end

    # Closes the queue: every waiting #pop returns nil, every waiting #push
    # and any later one raises Evix::ClosedError; #pop still returns the
    # items left, then nil. Closing twice is a no-op.
    # @return [nil]
    def close
      return if @closed

      @poppers.check_local # from another thread: raise before anything changes
      @pushers.check_local
      @closed = true
      @poppers.wake_all(nil)
      @pushers.wake_all(:closed)
      nil
    end

    # @return [Boolean] whether #close was called
    def closed?
      @closed
    end

    private

    # After a pop made room: moves the item of the pusher that has waited
    # longest in, then wakes it. The item goes in first, as a pusher woken
    # from outside a task runs inside #resume; a wait that had already ended
    # (resume false) takes its item back out.
    def refill
      while (waiter = @pushers.shift)
        @items << waiter.payload
        return if waiter.resume(true)

        @items.pop
      end
    end
  end
end
