# Compiles methods (2 ISeqs each, none kept: the heap stays small, GC short) without pause for
# SECONDS and counts them per 10 ms slice.
# Prints "ready", waits for a line on stdin, runs, then prints "<slice start ns> <evals>" per slice
# (CLOCK_MONOTONIC, the sidecar's clock) and "done".
#   ruby eval_loop.rb SECONDS
require "sdb"
$stdout.sync = true
seconds = Float(ARGV[0])
puts "ready #{Process.pid}"
$stdin.gets
slices = []
i = 0
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) + (seconds * 1e9).to_i
while (t = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)) < finish
  n = 0
  while Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t < 10_000_000
    RubyVM::InstructionSequence.compile("def loop_#{i}(x) = x + #{i}")
    i += 1
    n += 1
  end
  slices << [t, n]
end
slices.each { |s, n| puts "#{s} #{n}" }
puts "done"
