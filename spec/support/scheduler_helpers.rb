# frozen_string_literal: true

# Helpers of the spec/evix/scheduler_*_spec.rb files (`include EvixSchedulerHelpers`).
module EvixSchedulerHelpers
  # A subclass of Evix::Scheduler that counts how often Ruby calls each hook.
  # Only the hooks Evix::Scheduler defines on this Ruby are wrapped, so
  # `super` always exists.
  def counting_scheduler_class
    hooks = %i[io_wait io_read io_write io_select io_pread io_pwrite kernel_sleep block unblock
               process_wait address_resolve timeout_after].select { |hook| Evix::Scheduler.method_defined?(hook) }
    Class.new(Evix::Scheduler) do
      def calls
        @calls ||= Hash.new(0)
      end

      hooks.each do |hook|
        define_method(hook) do |*args, &block|
          calls[hook] += 1
          super(*args, &block)
        end
      end
    end
  end

  # Sets +scheduler+ on this thread, runs the block in a scheduled fiber, runs
  # the scheduler to completion and returns the block's value.
  # If the block fails, the remaining fibers are abandoned rather than run to
  # completion (which could wait forever).
  def run_with(scheduler)
    outcome = nil
    Fiber.set_scheduler(scheduler)
    Fiber.schedule { outcome = yield scheduler }
    scheduler.run
    outcome
  rescue Exception # rubocop:disable Lint/RescueException -- re-raised
    scheduler.define_singleton_method(:close) { nil }
    scheduler.loop.close unless scheduler.loop.closed?
    raise
  ensure
    Fiber.set_scheduler(nil)
  end
end
