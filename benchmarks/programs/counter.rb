# Benchmark target: one thread incrementing a counter in a tight loop of method
# calls. Each line read on stdin is answered with "<monotonic ns> <count>", read
# together, so the caller can compute iterations per second over any window.
# Exits when stdin closes. usage: ruby counter.rb
require "sdb"

$count = 0

def add(x) = x + 1
def inc = $count = add($count)

Thread.new { loop { inc; inc; inc; inc; inc; inc; inc; inc } }
puts "ready"
$stdout.flush
while $stdin.gets
  puts "#{Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)} #{$count}"
  $stdout.flush
end
