# GC share seen by sdb and by stackprof at once. Prints "ready {pid}", waits for "go" on stdin, then
# allocates for SECONDS (default 3) on the main thread under StackProf.run(mode: :wall, interval:
# 1000 us, raw), and prints "done {json}": stackprof's samples and GC samples, and the window's
# CLOCK_MONOTONIC ns, the clock of sdb's traces.
require "json"
require "sdb"
require "stackprof"
$stdout.sync = true
SECONDS = Float(ARGV.fetch(0, "3"))

def churn(keep, seconds)
  stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  i = 0
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop
    keep[i % keep.size] = Array.new(20) { |k| "s#{k}" }
    i += 1
  end
end

keep = Array.new(20_000)
puts "ready #{Process.pid}"
$stdin.gets
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
r = StackProf.run(mode: :wall, interval: 1000, raw: true) { churn(keep, SECONDS) }
t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
puts "done " + JSON.generate({ "samples" => r[:samples], "gc_samples" => r[:gc_samples], "t0" => t0, "t1" => t1 })
$stdin.gets
