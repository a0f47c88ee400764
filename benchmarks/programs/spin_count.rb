# ruby spin_count.rb WARMUP MEASURE [DEPTH]: a busy loop DEPTH calls deep (default 30) that counts
# its iterations; prints "ready" at once, then after WARMUP seconds counts for MEASURE seconds and
# prints the count (benchmarks/in_context_cost.py: what the in-context copies cost the app).
$stdout.sync = true
puts "ready"
def spin(until_t)
  n = 0
  n += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < until_t
  n
end

def nest(d, &blk) = d.zero? ? blk.call : nest(d - 1, &blk)

warmup, measure = Float(ARGV[0]), Float(ARGV[1])
depth = Integer(ARGV[2] || 30)
nest(depth) do
  spin(Process.clock_gettime(Process::CLOCK_MONOTONIC) + warmup)
  puts spin(Process.clock_gettime(Process::CLOCK_MONOTONIC) + measure)
end
