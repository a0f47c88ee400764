-- wrk script: every connection cycles through the app's endpoints (CPU view, DB read, JSON API,
-- DB write, IO wait) with varying parameters; at the end one JSON line with the totals and the
-- latency percentiles (microseconds), after wrk's own --latency report.
--   wrk -t1 -c8 -d20s --latency -s benchmarks/rails_app/wrk/mix.lua http://127.0.0.1:3000
local n = 0
local paths = { "/report?seed=%d", "/products?category=%d", "/api/products?page=%d", "POST", "/io" }

request = function()
  n = n + 1
  local p = paths[(n - 1) % #paths + 1]
  if p == "POST" then
    return wrk.format("POST", "/orders", { ["Content-Type"] = "application/x-www-form-urlencoded" },
                      string.format("product_id=%d&quantity=%d", n % 1000, n % 3 + 1))
  end
  return wrk.format("GET", string.format(p, n))
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "errors": {"connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}, "latency_us": {"mean": %.1f, "p50": %d, "p90": %d, ' ..
    '"p99": %d, "p999": %d, "max": %d}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
