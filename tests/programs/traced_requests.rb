# traced_requests.rb JSON: Sdb::Middleware called as a Rack server would call it, without one (every
# Ruby under test, where Debian's puma does not load): JSON is [[NAME, TRACEPARENT or null], ...];
# each request (GET /work/NAME, that header) is named NAME and burns CPU for 40 ms; all of them
# twice, in turn, then the program exits.
require "json"
require "sdb"
require "sdb/middleware"

def burn(ms)
  t_end = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t_end
  x
end

app = Sdb::Middleware.new(lambda do |env|
  env["sdb.endpoint"] = env["PATH_INFO"].delete_prefix("/work/")
  burn(40)
  [200, { "content-type" => "text/plain" }, ["ok\n"]]
end)
requests = JSON.parse(ARGV.fetch(0))
2.times do
  requests.each do |name, header|
    env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/work/#{name}" }
    env["HTTP_TRACEPARENT"] = header if header
    app.call(env)
  end
end
