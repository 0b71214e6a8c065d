# frozen_string_literal: true

desc "Validate sig/ and check it mirrors lib/ and declares every public method of lib/ and the extension"
task rbs: :compile do
  # rbs ships with Ruby as a bundled gem; Debian puts no `rbs` executable on PATH.
  sh FileUtils::RUBY, "-e", 'load Gem.bin_path("rbs", "rbs")', "--", "-I", "sig", "-r", "socket", "-r", "openssl",
     "validate", "--silent"
  sh FileUtils::RUBY, "-Ilib", "rakelib/rbs_check.rb"
end
