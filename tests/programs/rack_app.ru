# A plain Rack app (no Rails) under puma, with sdb's middleware and one Sdb.label: the app names
# its routes itself (env["sdb.endpoint"]) and logs every request it served to $SDB_TEST_LOG (one
# JSON line each: endpoint, request id, status), the log the trace's spans must match.
require "json"
require "sdb/middleware"

LOG = File.open(ENV.fetch("SDB_TEST_LOG"), "a")
LOG.sync = true
LOG_LOCK = Mutex.new

def burn(ms)
  t_end = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t_end
  x
end

def build_report = burn(4)

ROUTES = {
  "/cpu" => ["GET /cpu", -> { burn(2) }],
  "/io" => ["GET /io", -> { sleep 0.005 }],
  "/report" => ["GET /report", -> { Sdb.label(endpoint: "Report.build") { build_report } }],
}.freeze

use Sdb::Middleware
run(lambda do |env|
  endpoint, work = ROUTES.fetch(env["PATH_INFO"], ["GET (not found)", -> {}])
  env["sdb.endpoint"] = endpoint
  work.()
  status = ROUTES.key?(env["PATH_INFO"]) ? 200 : 404
  LOG_LOCK.synchronize do
    LOG.puts(JSON.dump("endpoint" => endpoint, "request_id" => env["HTTP_X_REQUEST_ID"], "status" => status))
  end
  [status, { "content-type" => "text/plain" }, ["ok\n"]]
end)
