# frozen_string_literal: true

# Puts the lane reports bench/run.rb wrote (one per Ruby) together into one
# document, the newest Ruby first, with how to read them and what bounds
# evix's figures (bench/PROFILE.md). Run by `rake bench` (and `rake bench:report`):
#
#   ruby bench/report.rb OUT LANE.md...

require "json"

out, *lanes = ARGV
abort "usage: ruby bench/report.rb OUT LANE.md..." if out.nil? || lanes.empty?

root = File.expand_path("..", __dir__)
found = lanes.select { |path| File.exist?(path) }
abort "bench/report.rb: no lane report found (#{lanes.join(", ")})" if found.empty?

RUNS_JUDGED = 3

# The lane's last three full runs: bench/run.rb keeps each run's target rows
# ([target, measured, needed, met]) in runs/ beside the lane report.
def lane_runs(lane_path)
  pattern = File.join(File.dirname(lane_path), "runs", "#{File.basename(lane_path, ".md")}-*.json")
  Dir[pattern].last(RUNS_JUDGED).map { |file| JSON.parse(File.read(file)) }
end

# Met only if measured and met in each of RUNS_JUDGED runs.
def verdict(rows)
  return "not judged" if rows.size < RUNS_JUDGED || rows.any? { |row| row.nil? || row.last == "n/a" }

  rows.all? { |row| row.last == "yes" } ? "yes" : "**no**"
end

# One target's table row: what it needs, each run's figure and verdict, and the overall one.
def target_line(name, runs)
  found = runs.map { |run| run["rows"].find { |row| row.first == name } }
  measured = found.map { |row| row ? "#{row[1]} (#{row[3]})" : "-" }
  "| #{name} | #{found.compact.first[2]} | #{measured.join(" | ")} | #{verdict(found)} |"
end

def targets_across_runs(lane_path)
  runs = lane_runs(lane_path)
  return nil if runs.empty?

  rows = runs.flat_map { |run| run["rows"].map(&:first) }.uniq.map { |name| target_line(name, runs) }
  <<~MD.chomp
    ## Targets (#{runs.last["targets"]}) in #{runs.size == 1 ? "the last full run" : "the last #{runs.size} full runs"}

    A target is met only if it holds in each of #{RUNS_JUDGED} full runs of this lane (measured, and met in that run).

    | Target | Needed | #{runs.map { |run| "#{run["date"]}, #{run["evix"]}" }.join(" | ")} | Met in every run |
    | --- | --- | #{(["--:"] * runs.size).join(" | ")} | --- |
    #{rows.join("\n")}
  MD
end

# Each lane's headings go one level down, under the document's title.
lane_sections = found.sort.reverse.map do |path|
  [File.read(path).strip, targets_across_runs(path)].compact.join("\n\n").gsub(/^#/, "##")
end
missing = lanes - found
not_run = missing.empty? ? "" : "\n\nNot run this time: #{missing.map { |path| File.basename(path) }.join(", ")}."
intro = <<~MD.chomp
  # evix benchmarks: side by side with the Ruby peers and a raw Rust ceiling

  One section per Ruby ("lane"), each measured in one run with the peers that Ruby's Debian packages have:
  Ruby 3.3 (a Debian sid chroot: async 2, io-event, io-stream, nio4r 2.7, puma) and Ruby 3.1 (the Debian 12
  host: async 1.30, nio4r 2.5, EventMachine). Each lane names its versions and the commit it measured.#{not_run}
MD

notes = <<~MD.chomp
  ## How to read this

  - These machines are shared and noisy (±10–30 % run to run): compare ratios within one run, not absolute
    figures across runs; each closed-loop and fixed-rate figure is the median of its rounds, with the spread.
  - The load generator (bench/loadgen, Rust, one thread, epoll) checks every echoed byte; a server that
    corrupts, drops or reorders data fails its row. Closed-loop rows keep one message in flight per connection;
    fixed-rate rows send on a schedule and measure latency from each send's due time.
  - At 100 and 1,000 connections the single client core saturates before the fast servers do: there compare the
    fixed-rate CPU µs per round trip (and the cachegrind instruction counts in the profile below), not round trips/s.
MD

profile = File.join(root, "bench", "PROFILE.md")
quick = found.any? { |path| File.read(path).include?("EVIX_BENCH_QUICK=1") }
parts = [intro, *lane_sections, notes]
parts << File.read(profile).strip if File.exist?(profile) && !quick
File.write(out, "#{parts.join("\n\n")}\n")
warn "bench: wrote #{out} from #{found.join(", ")}"
