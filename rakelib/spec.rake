# frozen_string_literal: true

begin
  require "rspec/core/rake_task"

  RSpec::Core::RakeTask.new(:spec)
rescue LoadError
  desc "Run the RSpec suite"
  task(:spec) { abort "rspec is not installed: run bin/setup" }
end

task spec: :compile
