# Threads recursing to ever-changing depths, so the sidecar keeps writing new stacks and samples:
# a trace that grows fast. Prints "ready <pid>" and runs until stdin closes (or for ARGV[0] seconds).
def down(n, until_t)
  return up(until_t) if n.zero?
  down(n - 1, until_t)
end

def up(until_t)
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < until_t
  x
end

require "sdb"

stop = false
threads = 4.times.map do |i|
  Thread.new do
    Thread.current.name = "churn-#{i}"
    depth = 1
    until stop
      down(depth, Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.003)
      depth = depth % 400 + 1 + i
    end
  end
end
$stdout.puts "ready #{Process.pid}"
$stdout.flush
limit = ARGV[0] ? Float(ARGV[0]) : nil
if limit
  sleep limit
else
  $stdin.gets
end
stop = true
threads.each(&:join)
