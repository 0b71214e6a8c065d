# frozen_string_literal: true

# Checks that sig/ mirrors lib/ (one RBS file per Ruby file: sig/evix/loop/loop.rbs
# for lib/evix/loop/loop.rb) and declares every public method of every Evix class
# and module, native or Ruby (run by `rake rbs` in a fresh Ruby with lib/ loaded).
require "rbs"
require "evix"

missing = []

# What Rust defines is declared in the file of the Ruby class it extends
# (CONTRIBUTING.md, "Ruby").
rb_files = Dir.glob("**/*.rb", base: "lib").map { |path| path.delete_suffix(".rb") }
rbs_files = Dir.glob("**/*.rbs", base: "sig").map { |path| path.delete_suffix(".rbs") }
(rb_files - rbs_files).each { |path| missing << "sig/#{path}.rbs (for lib/#{path}.rb)" }
(rbs_files - rb_files).each { |path| missing << "lib/#{path}.rb (sig/#{path}.rbs mirrors no Ruby file)" }

loader = RBS::EnvironmentLoader.new
loader.add(path: Pathname("sig"))
loader.add(library: "socket")
loader.add(library: "openssl")
env = RBS::Environment.from_loader(loader).resolve_type_names
builder = RBS::DefinitionBuilder.new(env: env)

Evix.constants.map { |name| Evix.const_get(name) }.grep(Module).each do |mod|
  type = RBS::TypeName.new(name: mod.name.split("::").last.to_sym, namespace: RBS::Namespace.parse("::Evix"))
  next missing << "#{mod} (not declared at all)" unless env.class_decls.key?(type)

  declared = builder.build_instance(type).methods.keys
  (mod.public_instance_methods(false) - declared).each { |m| missing << "#{mod}##{m}" }
  singleton = builder.build_singleton(type).methods.keys
  (mod.singleton_methods(false) - singleton).each { |m| missing << "#{mod}.#{m}" }
end

abort "sig/ lacks #{missing.size} file(s) or declaration(s):\n  #{missing.sort.join("\n  ")}" unless missing.empty?
puts "sig/ mirrors lib/ and declares every public method of Evix"
