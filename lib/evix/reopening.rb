# frozen_string_literal: true

module Evix
  # Prepended to ::IO. A loop trusts a registration pinned to an IO object
  # without asking the kernel again; IO#reopen puts another file under that
  # same object and fd number, so it tells the loops first.
  module Reopening
    # @return [::IO]
    def reopen(...)
      Evix::Loop.io_reopened
      super(...)
    end
  end
end
::IO.prepend(Evix::Reopening)
