# frozen_string_literal: true

# `include_context "with a loop"`: +ev+, a loop made when first used (in a
# child forked before that, a loop of the child's own), and #in_task to run
# code as a task of it. A spec that counts descriptors makes it first:
# `before { ev }`.
RSpec.shared_context "with a loop" do
  let(:ev) { new_loop }

  # Runs the block in a task of +ev+ and returns its value (or raises its
  # exception); Task#wait drives the loop meanwhile.
  def in_task(&)
    ev.spawn(&).wait
  end
end

# `include_context "an Evix::IO on a socket pair"`: +io+, an Evix::IO of +ev+
# over one end of a UNIX socket pair, and +peer+, the plain other end.
RSpec.shared_context "an Evix::IO on a socket pair" do
  include_context "with a loop"

  let(:pair) { socket_pair }
  let(:io) { ev.wrap(pair[0]) }
  let(:peer) { pair[1] }
end

# `include_context "in a temporary directory"`: +@dir+, a directory of the
# example's own, removed with everything in it when the example ends.
RSpec.shared_context "in a temporary directory" do
  around do |example|
    Dir.mktmpdir("evix-spec-") do |dir|
      @dir = dir
      example.run
    end
  end
end
