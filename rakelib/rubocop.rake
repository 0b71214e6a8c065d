# frozen_string_literal: true

begin
  require "rubocop/rake_task"

  RuboCop::RakeTask.new(:rubocop)
rescue LoadError
  desc "Run RuboCop"
  task(:rubocop) { abort "rubocop is not installed: run bin/setup" }
end
