# A plain Rack app under puma with sdb's middleware, for the trace-link tests: every request is
# named by its path (GET /work/NAME -> endpoint NAME) and burns CPU for 40 ms, so its samples can be
# told apart by their endpoint in every output format.
require "sdb/middleware"

def burn(ms)
  t_end = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t_end
  x
end

use Sdb::Middleware
run(lambda do |env|
  env["sdb.endpoint"] = env["PATH_INFO"].delete_prefix("/work/")
  burn(40)
  [200, { "content-type" => "text/plain" }, ["ok\n"]]
end)
