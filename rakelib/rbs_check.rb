# frozen_string_literal: true

# Checks that sig/ declares every public method of every Evix class and
# module, native or Ruby (run by `rake rbs` in a fresh Ruby with lib/ loaded).
require "rbs"
require "evix"

loader = RBS::EnvironmentLoader.new
loader.add(path: Pathname("sig"))
loader.add(library: "socket")
loader.add(library: "openssl")
builder = RBS::DefinitionBuilder.new(env: RBS::Environment.from_loader(loader).resolve_type_names)

missing = []
Evix.constants.map { |name| Evix.const_get(name) }.grep(Module).each do |mod|
  type = RBS::TypeName.new(name: mod.name.split("::").last.to_sym, namespace: RBS::Namespace.parse("::Evix"))
  declared = builder.build_instance(type).methods.keys
  (mod.public_instance_methods(false) - declared).each { |m| missing << "#{mod}##{m}" }
  singleton = builder.build_singleton(type).methods.keys
  (mod.singleton_methods(false) - singleton).each { |m| missing << "#{mod}.#{m}" }
end

abort "sig/ lacks #{missing.size} public method(s):\n  #{missing.sort.join("\n  ")}" unless missing.empty?
puts "sig/ declares every public method of Evix"
