# frozen_string_literal: true

require "spec_helper"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# bench/report.rb: the lanes put together, and each lane's targets judged over
# its last three full runs (met only if met in every one of them).
RSpec.describe "bench/report.rb" do
  let(:script) { File.expand_path("../../bench/report.rb", __dir__) }

  include_context "in a temporary directory"

  def lane(name = "lane-3.3")
    path = File.join(@dir, "#{name}.md")
    File.write(path, "# Ruby 3.3 lane\n\nfigures\n")
    path
  end

  def save_run(stamp, rows, name = "lane-3.3")
    FileUtils.mkdir_p(File.join(@dir, "runs"))
    record = { "date" => "2026-12-0#{stamp}", "evix" => "commit c#{stamp}", "targets" => "against async 2",
               "rows" => rows }
    File.write(File.join(@dir, "runs", "#{name}-2026120#{stamp}-000000.json"), JSON.generate(record))
  end

  def report(*lanes)
    out = File.join(@dir, "RESULTS.md")
    _, err, status = Open3.capture3(RbConfig.ruby, script, out, *lanes)
    expect(status).to be_success, err
    File.read(out)
  end

  def verdict(text, target)
    text[/^\| #{Regexp.escape(target)} \|.*\| ([^|]+) \|$/, 1]
  end

  it "puts the lane under the document's title, one heading level down" do
    text = report(lane)
    expect(text).to start_with("# evix benchmarks")
    expect(text).to include("## Ruby 3.3 lane\n\nfigures")
  end

  it "meets a target only if every one of the last three runs met it" do
    path = lane
    save_run(1, [["steady", "1.2x", "≥ 1.00x", "yes"], ["flaky", "1.1x", "≥ 1.00x", "yes"]])
    save_run(2, [["steady", "1.3x", "≥ 1.00x", "yes"], ["flaky", "0.9x", "≥ 1.00x", "**no**"]])
    save_run(3, [["steady", "1.2x", "≥ 1.00x", "yes"], ["flaky", "1.2x", "≥ 1.00x", "yes"]])
    text = report(path)
    expect(text).to include("### Targets (against async 2) in the last 3 full runs")
    expect(verdict(text, "steady")).to eq("yes")
    expect(verdict(text, "flaky")).to eq("**no**")
    expect(text).to include("| flaky | ≥ 1.00x | 1.1x (yes) | 0.9x (**no**) | 1.2x (yes) | **no** |")
  end

  it "judges only the newest three runs" do
    path = lane
    save_run(1, [["t", "0.5x", "≥ 1.00x", "**no**"]])
    (2..4).each { |stamp| save_run(stamp, [["t", "1.5x", "≥ 1.00x", "yes"]]) }
    text = report(path)
    expect(verdict(text, "t")).to eq("yes")
    runs = (2..4).map { |stamp| "2026-12-0#{stamp}, commit c#{stamp}" }
    expect(text).to include("| Target | Needed | #{runs.join(" | ")} | Met in every run |")
  end

  it "does not judge a target with fewer than three runs, or one a run could not measure" do
    path = lane
    save_run(1, [["few", "1.5x", "≥ 1.00x", "yes"]])
    save_run(2, [["few", "1.5x", "≥ 1.00x", "yes"], ["gap", "-", "≤ 1.10x", "n/a"]])
    text = report(path)
    expect(verdict(text, "few")).to eq("not judged")
    expect(verdict(text, "gap")).to eq("not judged")
  end

  it "adds no cross-run table to a lane with no saved runs" do
    expect(report(lane)).not_to include("### Targets (against async 2) in the last")
  end
end
