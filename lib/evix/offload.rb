# frozen_string_literal: true

# The offload thread pool (see Evix::Loop#offload).
module Evix
  # A bounded pool of threads for blocking work. Jobs run on a pool thread;
  # their result (or exception) is handed back to the loop with Loop#post.
  class Offload
    # @return [Integer] how many threads the pool may start
    attr_reader :size

    def initialize(size: 4)
      unless size.is_a?(Integer) && size.positive?
        raise ArgumentError,
              "size must be a positive Integer (got #{size.inspect})"
      end

      @size = size
      @jobs = Thread::Queue.new
      @threads = []
      @idle = 0
      @lock = Thread::Mutex.new
    end

    # Runs +work+ on a pool thread and calls +done+ with [value, error] on
    # +loop+'s thread. @return [nil]
    def submit(loop, work, &done)
      raise ClosedError, "offload pool is closed" if @jobs.closed?

      @lock.synchronize do
        @threads << Thread.new { work_off } if @jobs.size >= @jobs.num_waiting && @threads.size < @size
        @jobs << [loop, work, done]
      end
      nil
    end

    # Stops the threads once queued jobs are done. @return [nil]
    def close
      @jobs.close
      @threads.each(&:join)
      nil
    end

    private

    def work_off
      while (job = next_job)
        run_job(*job)
      end
    end

    def run_job(loop, work, done)
      result = begin
        [work.call, nil]
      rescue Exception => e # rubocop:disable Lint/RescueException -- handed to the caller
        [nil, e]
      end
      loop.post { done.call(*result) }
    rescue ClosedError
      nil
    end

    def next_job
      @lock.synchronize { @idle += 1 }
      @jobs.pop
    ensure
      @lock.synchronize { @idle -= 1 }
    end
  end

  @offload_lock = Thread::Mutex.new

  # The process-wide offload pool (EVIX_OFFLOAD_THREADS threads at most, default 4).
  # @return [Evix::Offload]
  def self.offload_pool
    @offload_lock.synchronize do
      @offload_pool = nil if @offload_pid != Process.pid
      @offload_pid = Process.pid
      @offload_pool ||= Offload.new(size: Integer(ENV.fetch("EVIX_OFFLOAD_THREADS", "4")))
    end
  end
end
