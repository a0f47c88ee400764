# ruby callee_share.rb N SECONDS [sdb]: a caller that spends half its time in a callee of N loop steps
# per call and half in the same loop of its own, for SECONDS. Every profiler that samples without
# bias gives Object#callee about half the self time, whatever N (N=20: calls under 1 us).
# Prints "ready" first (tests/integration/test_in_context.py, benchmarks/real_check_spread.py).
def callee(n)
  j = 0
  j += 1 while j < n
end

def caller_of(n, reps)
  i = 0
  while i < reps
    callee(n)
    k = 0
    k += 1 while k < n
    i += 1
  end
end

require "sdb" if ARGV[2] == "sdb"
$stdout.sync = true
puts "ready"
n = Integer(ARGV[0])
seconds = Float(ARGV[1] || 4)
t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
caller_of(n, 100_000 / n + 1) while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < seconds
