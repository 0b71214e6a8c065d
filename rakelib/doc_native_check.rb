# frozen_string_literal: true

# Checks docs/api/native.rb, the YARD reference of the Rust extension, against
# the compiled extension (run by `rake doc:native` in a fresh Ruby with lib/ on
# the load path): every class, constant and method the extension defines under
# Evix is there (a constant with its value, a method with its visibility and a
# parameter list of its arity), and the file documents nothing the extension lacks.
require "yard"
require "evix"

STUB = "docs/api/native.rb"

# The method +name+ as +mod+ itself defines it, past any module prepended to it.
def own_method(mod, name)
  method = mod.instance_method(name)
  method = method.super_method while method && method.owner != mod
  method
end

# "Evix::Loop#run" => [visibility, arity] of each method defined in C (it has no
# source_location) on +mod+ or its singleton class. Struct.new's methods and the
# private copies module_function makes in a module are C methods too, but none
# of the extension's (which defines no instance methods on a module).
def native_methods_of(mod)
  return {} if mod.is_a?(Class) && mod < Struct

  tables = mod.is_a?(Class) ? { "#" => mod, "." => mod.singleton_class } : { "." => mod.singleton_class }
  tables.each_with_object({}) do |(separator, table), found|
    %i[public private protected].each do |visibility|
      table.send(:"#{visibility}_instance_methods", false).each do |name|
        method = own_method(table, name)
        found["#{mod}#{separator}#{name}"] = [visibility, method.arity] if method && method.source_location.nil?
      end
    end
  end
end

# +mod+ and the classes and modules named under it.
def modules_under(mod)
  inner = mod.constants.map { |name| mod.const_get(name) }.grep(Module).select { |m| m.name&.start_with?("#{mod}::") }
  [mod, *inner.flat_map { |m| modules_under(m) }]
end

# "Evix::READ" => value of each constant under +mod+ that the extension defines
# (Ruby gives it the extension's file as its location, or none).
def native_constants_of(mod)
  mod.constants.each_with_object({}) do |name, found|
    file, = mod.const_source_location(name)
    found["#{mod}::#{name}"] = mod.const_get(name) if file.nil? || file.end_with?(".#{RbConfig::CONFIG["DLEXT"]}")
  end
end

# The arity of a method with YARD's +parameters+ as the extension states it: the
# number of required ones, or -1 (what a C method taking argc/argv reports) when
# any is optional, a keyword or a rest. A block parameter counts for nothing.
def arity_of(parameters)
  return -1 if parameters.any? { |name, default| default || name.end_with?(":") || name.start_with?("*") }

  parameters.count { |name, _| !name.start_with?("&") }
end

YARD::Registry.clear
YARD.parse(STUB)
documented = YARD::Registry.all(:method).to_h do |method|
  [method.path, [method.visibility, arity_of(method.parameters), method.signature]]
end
modules = modules_under(Evix)
native = modules.map { |mod| native_methods_of(mod) }.reduce({}, :merge)
constants = modules.map { |mod| native_constants_of(mod) }.reduce({}, :merge)

problems = (native.keys - documented.keys).map { |path| "#{path} (#{native[path][0]}): not in #{STUB}" } +
           (documented.keys - native.keys).map { |path| "#{path}: in #{STUB}, not in the extension" }
constants.each do |path, value|
  stub = YARD::Registry.at(path)
  if stub.nil? then problems << "#{path}: not in #{STUB}"
  elsif stub.type == :constant && stub.value != value.inspect
    problems << "#{path}: #{value.inspect} in the extension, #{stub.value} in #{STUB}"
  end
end
YARD::Registry.all(:constant, :class).reject { |object| constants.key?(object.path) }.each do |object|
  problems << "#{object.path}: in #{STUB}, not defined by the extension"
end
(native.keys & documented.keys).each do |path|
  visibility, arity = native[path]
  stub_visibility, stub_arity, signature = documented[path]
  problems << "#{path}: #{visibility} in the extension, #{stub_visibility} in #{STUB}" if visibility != stub_visibility
  problems << "#{path}: arity #{arity} in the extension, `#{signature}` in #{STUB}" if arity != stub_arity
end

abort "#{STUB} does not match the extension:\n  #{problems.sort.join("\n  ")}" unless problems.empty?
puts "#{STUB} documents the #{constants.size} classes and constants and the #{native.size} methods " \
     "the extension defines"
