# frozen_string_literal: true

# The smallest Rack app: `evix serve examples/hello.ru`, then
# `curl http://127.0.0.1:9292/` says hello.
run ->(_env) { [200, { "content-type" => "text/plain" }, ["hello from evix\n"]] }
