# One thread that works ~1 ms and sleeps 50 ms, over and over: it is on a CPU ~2 % of the time.
# For the in-context reads' timer test: the timer follows the thread, so it fires only in those
# bursts, on the thread's CPU (pin the program with taskset), and on no other CPU.
require "sdb"
$stdout.sync = true

def burst
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 0.001
  x
end

puts "ready"
loop do
  burst
  sleep 0.05
end
