# frozen_string_literal: true

# Blocking work run on a pool of threads while the fiber that asked for it
# waits without blocking its loop: the pool (Evix::Offload) and the
# process-wide one Evix.offload and Evix::Loop#offload share (Evix.offload_pool).
module Evix
  # A bounded pool of threads for blocking work. Jobs run on a pool thread;
  # their result (or exception) is handed back to the loop with Loop#post.
  #
  # A job always hands something back, even one that ends its own thread
  # (Thread.exit in the job, Thread#kill of the pool thread from elsewhere):
  # its caller gets an Evix::Error then, and a new thread takes over the jobs
  # still queued, so neither the caller nor the pool waits forever.
  class Offload
    # @return [Integer] how many threads the pool may start
    attr_reader :size

    # @param size [Integer] the most threads the pool starts
    # @raise [ArgumentError] +size+ is not a positive Integer
    def initialize(size: 4)
      unless size.is_a?(Integer) && size.positive?
        raise ArgumentError,
              "size must be a positive Integer (got #{size.inspect})"
      end

      @size = size
      @jobs = Thread::Queue.new
      @threads = []
      @lock = Thread::Mutex.new
    end

    # Runs +work+ on a pool thread and calls +done+ with [value, error] on
    # +loop+'s thread.
    # @param loop [Evix::Loop] where +done+ runs (through Loop#post)
    # @param work [#call] what runs on a pool thread
    # @yieldparam value [Object, nil] what +work+ returned
    # @yieldparam error [Exception, nil] what +work+ raised
    # @return [nil]
    # @raise [Evix::ClosedError] the pool is closed
    def submit(loop, work, &done)
      raise ClosedError, "offload pool is closed" if @jobs.closed?

      @lock.synchronize do
        start_thread if @jobs.size >= @jobs.num_waiting && @threads.size < @size
        @jobs << [loop, work, done]
      end
      nil
    end

    # Stops the threads once queued jobs are done; later #submit calls raise
    # Evix::ClosedError.
    # @return [nil]
    def close
      @jobs.close
      # Each thread leaves @threads as it ends (see #work_off), and one that
      # a job killed may have started a successor: join until none is left.
      while (thread = @lock.synchronize { @threads.first })
        thread.join
      end
      nil
    end

    private

    # Under @lock.
    def start_thread
      # Named so the scheduler's deadlock check knows an idle pool thread
      # cannot release a Mutex or Queue (a busy one holds the loop).
      @threads << Thread.new { work_off }.tap { |thread| thread.name = "evix offload" }
    end

    def work_off
      while (job = @jobs.pop)
        run_job(*job)
      end
    ensure
      retire
    end

    # The calling pool thread ends: when the pool closes, or part way through
    # a job that killed it. Jobs still queued then have no thread to run them
    # unless one starts here.
    def retire
      @lock.synchronize do
        @threads.delete(Thread.current)
        start_thread unless @jobs.empty?
      end
    rescue ThreadError
      nil # the process is exiting: no new threads
    end

    # Hands the job's value or exception back to +loop+. Thread.exit and
    # Thread#kill are no exception a rescue sees: they unwind through the
    # ensure, which hands back an Evix::Error instead.
    def run_job(loop, work, done)
      result = nil
      begin
        result = [work.call, nil]
      rescue Exception => e # rubocop:disable Lint/RescueException -- handed to the caller
        result = [nil, e]
      end
    ensure
      result ||= [nil, Error.new("the offload job ended its pool thread (Thread.exit or Thread#kill) " \
                                 "before it returned")]
      begin
        loop.post { done.call(*result) }
      rescue ClosedError
        nil
      end
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
