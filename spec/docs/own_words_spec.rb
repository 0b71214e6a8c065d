# frozen_string_literal: true

require "spec_helper"

# The repository speaks of itself only: code, specs, docs and benchmark notes
# point at sections of docs/ (or name a commit and a date), never at a design
# document that is not here, a tracker's numbers or numbered rounds of work,
# which mean nothing to a reader of this repository.
RSpec.describe "The repository's own words" do
  root = File.expand_path("../..", __dir__)
  # This file names what it forbids, in its examples below.
  itself = File.join("spec", "docs", File.basename(__FILE__))
  forbidden = {
    "a design document outside the repository" => /DESIGN(\.md|\s+§)/,
    "an issue number" => /\b[Ii]ssues?\s+#?\d+\b|\bissue-\d+\b/,
    "a numbered session" => /\b[Ss]ession(s|-)?\s*\d+\b/,
    "a numbered round of work" => /\b[Rr]ound\s+\d+\b/,
    "a section sign without a document" => /(?<!RFC \d{4} )§\s*\d/
  }

  # What git lists (tracked and new files, not ignored ones); without git (a
  # chroot, an unpacked archive), every file but build output.
  build_output = %w[.git/ target/ tmp/ pkg/ doc/ .yardoc/ .bundle/]
  files = Dir.chdir(root) do
    listed = begin
      IO.popen(%w[git ls-files -z --cached --others --exclude-standard], err: File::NULL, &:read).split("\0")
    rescue SystemCallError
      []
    end
    listed = Dir.glob("**/*", File::FNM_DOTMATCH).reject { |path| path.start_with?(*build_output) } if listed.empty?
    listed.select { |path| File.file?(path) } - ["Cargo.lock", itself]
  end

  it "lists the repository's files" do
    expect(files).to include("README.md", "lib/evix.rb", "bench/PROFILE.md")
  end

  forbidden.each do |what, pattern|
    it "has no #{what} in any file" do
      found = files.flat_map do |path|
        text = File.binread(File.join(root, path))
        next [] if text.include?("\0") # a binary file

        text.force_encoding(Encoding::UTF_8).scrub.each_line.with_index(1)
            .select { |line, _| line.match?(pattern) }.map { |line, number| "#{path}:#{number}: #{line.strip}" }
      end
      expect(found).to be_empty, "found #{what}:\n  #{found.join("\n  ")}"
    end
  end

  it "catches each kind of reference it forbids" do
    examples = ["see DESIGN.md", "(issue 14)", "Issue #5", "session 8", "Sessions 4", "round 3", "DESIGN §5", "§9"]
    expect(examples.reject { |text| forbidden.values.any? { |pattern| text.match?(pattern) } }).to be_empty
    expect(["RFC 8305 §4", "three rounds each", "ruby/ruby#7081", "issued 3"].select do |text|
      forbidden.values.any? { |pattern| text.match?(pattern) }
    end).to be_empty
  end
end
