# One thread that sleeps 20 ms at a time, alternately in two different methods, for the idle-reuse
# test: its stack changes between sleeps, so a profiler reusing a blocked thread's last stack must
# notice every change (the thread took the GVL to make it).
require "sdb"

def nap_in_a = sleep(0.02)
def nap_in_b = sleep(0.02)

sleeper = Thread.new do
  Thread.current.name = "alternating"
  loop do
    nap_in_a
    nap_in_b
  end
end
sleep 0.1
$stdout.puts "ready"
$stdout.flush
sleeper.join
