# Threads recursing to ever-changing depths, so the sidecar keeps writing new stacks and samples:
# a trace that grows fast. Prints "ready <pid>" and runs until stdin closes (or for ARGV[0] seconds).
require_relative "descend"
require "sdb"

SPIN = 25_000 # iterations at the bottom of each descent: a few ms

stop = false
threads = 4.times.map do |i|
  Thread.new do
    Thread.current.name = "churn-#{i}"
    depth = 1
    until stop
      descend(depth, SPIN)
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
