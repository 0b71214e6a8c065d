# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "open3"
require "tmpdir"
require_relative "../../rakelib/ri_doc"

# The methods written in Rust are documented in docs/api/native.rb with YARD's
# tags; the gem ships that file rendered for RDoc, so that `ri` shows them
# readably (rake gem:check runs ri on a real install).
RSpec.describe EvixRiDoc do
  it "makes a comment's YARD tags into an RDoc labeled list after its text, and keeps the code" do
    source = <<~RUBY
      # frozen_string_literal: true

      # A header that only YARD's file needs.

      module Evix
        # Does a thing to +io+.
        # @param io [::IO, Integer] what to watch
        #   (an fd number too)
        # @param timeout [Numeric, nil]
        # @yield no arguments
        # @yieldparam bits [Integer] the ready bits
        # @return [Integer, nil] the bits; nil on timeout
        # @raise [Evix::ClosedError] the IO was closed
        # @api private
        def watch(io, timeout = nil); end
      end
    RUBY
    expect(described_class.render(source)).to eq(<<~RUBY)
      #{described_class::HEADER}
      module Evix
        # Does a thing to +io+.
        #
        # [+io+] (::IO, Integer) what to watch (an fd number too)
        # [+timeout+] (Numeric, nil)
        # [Yields] no arguments
        # [Block's +bits+] (Integer) the ready bits
        # [Returns] Integer, nil: the bits; nil on timeout
        # [Raises] Evix::ClosedError: the IO was closed
        # [Internal] used by evix itself, not part of its API
        def watch(io, timeout = nil); end
      end
    RUBY
  end

  it "renders docs/api/native.rb so that ri shows a native method's text and its arguments as a list" do
    Dir.mktmpdir("evix-ri-") do |dir|
      path = described_class.write(dir)
      expect(path).to eq(File.join(dir, "docs", "api", "ri", "native.rb"))
      expect(File.read(path)).not_to match(/^\s*# @/)
      out, status = Open3.capture2e("rdoc", "--ri", "--quiet", "--output", File.join(dir, "ri"), path, chdir: dir)
      expect(status).to be_success, out
      out, status = Open3.capture2e("ri", "--no-pager", "--format=rdoc", "--doc-dir", File.join(dir, "ri"),
                                    "Evix::Loop#add_timer")
      expect(status).to be_success, out
      expect(out).to include("Calls the block once after").and include("Returns:")
        .and include("<tt>delay</tt>:\n  (Numeric) seconds, >= 0")
    end
  end
end
