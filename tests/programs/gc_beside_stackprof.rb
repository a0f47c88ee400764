# GC share seen by sdb and by stackprof at once. Prints "ready {pid}", waits for "go" on stdin, then
# allocates for SECONDS (default 3) of its own CPU time (however long a busy machine makes that) on
# the main thread under StackProf.run(mode: :cpu, interval:
# 1000 us, raw), and prints "done {json}": stackprof's samples and GC samples, and the window's
# CLOCK_MONOTONIC ns, the clock of sdb's traces. CPU mode: stackprof's timer then ticks with the
# process's own CPU time; in wall mode, on a machine kept busy, its timer signals pile up while
# the process waits for a CPU and only one is delivered, and one that lands in GC is counted at
# once while the others wait for a safe point: its GC share drifted 6 points up under two `yes`.
require "json"
require "sdb"
require "stackprof"
$stdout.sync = true
SECONDS = Float(ARGV.fetch(0, "3"))

def churn(keep, seconds)
  stop = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) + seconds
  i = 0
  while Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) < stop
    keep[i % keep.size] = Array.new(20) { |k| "s#{k}" }
    i += 1
  end
end

keep = Array.new(20_000)
puts "ready #{Process.pid}"
$stdin.gets
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
r = StackProf.run(mode: :cpu, interval: 1000, raw: true) { churn(keep, SECONDS) }
t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
puts "done " + JSON.generate({ "samples" => r[:samples], "gc_samples" => r[:gc_samples], "t0" => t0, "t1" => t1 })
$stdin.gets
