# Compiles methods (2 ISeqs each, none kept: the heap stays small, GC short) without pause for
# SECONDS and counts them per 10 ms slice.
# Prints "ready", waits for a line on stdin, runs, then prints "<slice start ns> <evals> <asleep ns>"
# per slice (CLOCK_MONOTONIC, the sidecar's clock; asleep: neither on a CPU nor waiting for one, the
# slice's wall time less its CPU time, CLOCK_THREAD_CPUTIME_ID, and its run-queue delay, schedstat's
# second field) and "done".
#   ruby eval_loop.rb SECONDS
require "sdb"
$stdout.sync = true
seconds = Float(ARGV[0])
puts "ready #{Process.pid}"
$stdin.gets
def busy_ns
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID, :nanosecond) +
    File.read("/proc/thread-self/schedstat").split[1].to_i
end
slices = []
i = 0
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) + (seconds * 1e9).to_i
busy = busy_ns
t = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
while t < finish
  n = 0
  while Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t < 10_000_000
    RubyVM::InstructionSequence.compile("def loop_#{i}(x) = x + #{i}")
    i += 1
    n += 1
  end
  b = busy_ns
  t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)   # slices follow each other
  slices << [t, n, t1 - t - (b - busy)]
  busy, t = b, t1
end
slices.each { |s, n, asleep| puts "#{s} #{n} #{asleep}" }
puts "done"
