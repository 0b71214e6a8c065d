# frozen_string_literal: true

# Tickers: a task or fiber that counts while another one waits, proof that
# the wait suspends only the waiting one and the loop keeps running the rest.
module EvixTickers
  # A task of +evloop+ that counts ticks (counter[0]) every 5 ms until +stop+
  # returns true.
  def ticker(evloop, counter, stop)
    evloop.spawn do
      until stop.call
        evloop.sleep(0.005)
        counter[0] += 1
      end
    end
  end

  # A fiber of the current Fiber.scheduler that counts 10 ms ticks
  # (state[:ticks]) until state[:done] is set.
  def start_ticker(state)
    state[:ticks] = 0
    Fiber.schedule do
      until state[:done]
        state[:ticks] += 1
        sleep 0.01
      end
    end
  end
end

RSpec.configure { |config| config.include EvixTickers }
