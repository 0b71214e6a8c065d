# frozen_string_literal: true

require "spec_helper"
require "open3"
require "rbconfig"
require "tmpdir"

# Every ```ruby block of the README (and of docs/*.md) is a program that runs as
# written: in a new Ruby with this checkout's lib/ (and the built extension), from
# an empty directory, offline, within a deadline. It must exit 0, print nothing on
# stderr, and leave nothing behind in its directory (a socket file, say). A
# ```text block right after it (blank lines between at most) is what it prints on
# stdout, exactly. A block marked ```ruby fragment is a piece of a bigger program,
# and the README says so: it is only checked for Ruby syntax.
# The fenced code blocks of a Markdown file: the Ruby ones, each with the
# ```text block that follows it, if one does.
module MarkdownExamples
  # One ```ruby block: where it starts, its info string, its code, what it prints.
  Block = Struct.new(:file, :line, :info, :code, :output, keyword_init: true) do
    def fragment? = info.split.include?("fragment")
    def where = "#{file}:#{line}"
  end

  module_function

  # Every fenced block of +lines+: its opening line's index, info string, text and
  # closing line's index.
  def fences(lines)
    found = []
    start = nil
    lines.each_with_index do |text, index|
      if start.nil? && text.start_with?("```")
        start = index
      elsif start && text == "```"
        found << { open: start, info: lines[start].delete_prefix("```").strip,
                   text: "#{lines[(start + 1)...index].join("\n")}\n", close: index }
        start = nil
      end
    end
    found
  end

  # The ```ruby blocks of the file at +path+ (named +name+ in descriptions).
  def ruby_blocks(path, name)
    lines = File.readlines(path, chomp: true)
    fences = fences(lines)
    fences.each_with_index.filter_map do |fence, index|
      next unless fence[:info].split.first == "ruby"

      Block.new(file: name, line: fence[:open] + 1, info: fence[:info], code: fence[:text],
                output: output_after(lines, fence, fences[index + 1]))
    end
  end

  # The text of +following+ if it is a ```text block with only blank lines before it.
  def output_after(lines, fence, following)
    return unless following && following[:info] == "text"

    following[:text] if lines[(fence[:close] + 1)...following[:open]].all? { |line| line.strip.empty? }
  end
end

RSpec.describe "The README's examples" do
  root = File.expand_path("../..", __dir__)
  lib = File.join(root, "lib")

  documents = [File.join(root, "README.md"), *Dir.glob(File.join(root, "docs", "*.md"))]
  examples = documents.flat_map { |path| MarkdownExamples.ruby_blocks(path, path.delete_prefix("#{root}/")) }

  # Runs +code+ as app.rb in an empty directory (also its TMPDIR); returns
  # [status, stdout, stderr, what was left in the directory], or raises after +timeout+.
  def run_example(code, lib, timeout: 20)
    Dir.mktmpdir("evix-readme-") do |dir|
      File.write(File.join(dir, "app.rb"), code)
      env = { "TMPDIR" => dir, "RUBYOPT" => nil, "EVIX_BACKTRACE" => nil, "EVIX_STALL_MS" => nil }
      Open3.popen3(env, RbConfig.ruby, "-I", lib, "app.rb", chdir: dir, pgroup: true) do |input, out, err, thread|
        input.close
        readers = [Thread.new { out.read }, Thread.new { err.read }]
        unless thread.join(timeout)
          Process.kill(:KILL, -thread.pid)
          raise "did not end within #{timeout}s; its stderr: #{readers[1].join(1)&.value}"
        end
        [thread.value, readers[0].value, readers[1].value, Dir.children(dir) - ["app.rb"]]
      end
    end
  end

  it "finds the README's Ruby blocks, and the output shown after them" do
    readme = examples.select { |block| block.file == "README.md" }
    expect(readme.size).to be >= 10
    expect(readme.count(&:output)).to be >= 8
    expect(readme.select(&:fragment?).size).to be <= 2
  end

  it "tells a block's output from the next example's" do
    Dir.mktmpdir do |dir|
      path = File.join(dir, "doc.md")
      File.write(path, "```ruby\nputs 1\n```\n\n```text\n1\n```\n\nprose\n\n" \
                       "```ruby\nputs 2\n```\nsaid\n```text\nno\n```\n")
      found = MarkdownExamples.ruby_blocks(path, "doc.md")
      expect(found.map { |block| [block.line, block.code, block.output] })
        .to eq([[1, "puts 1\n", "1\n"], [11, "puts 2\n", nil]])
    end
  end

  examples.each do |block|
    if block.fragment?
      it "#{block.where} (a fragment) is Ruby" do
        _out, err, status = Open3.capture3(RbConfig.ruby, "-c", stdin_data: block.code)
        expect(status).to be_success, err
      end
      next
    end

    it "#{block.where} runs as written#{" and prints what follows it" if block.output}" do
      status, out, err, left = run_example(block.code, lib)
      expect(status).to be_success, "exited #{status.inspect}; stderr:\n#{err}"
      expect(err).to eq("")
      expect(out).to eq(block.output) if block.output
      expect(left).to be_empty, "left behind: #{left.join(", ")}"
    end
  end
end
