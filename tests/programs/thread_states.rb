# Threads in known states, for the thread-state tests:
#   busy      - alone on the CPU it gets: a tight loop of method calls (mostly running)
#   blocked   - waits on a Queue that never gets an item (blocked)
#   fighter-1, fighter-2 - (only with "fight") two more CPU-bound threads: with busy, three threads
#               fight for the GVL, so each spends much of its time waiting for it
require "sdb"

def spin(n) = n + 1

def busy_loop
  i = 0
  i = spin(i) while true
end

def wait_on_queue(q) = q.pop

threads = []
threads << Thread.new { Thread.current.name = "busy"; busy_loop }
q = Queue.new
threads << Thread.new { Thread.current.name = "blocked"; wait_on_queue(q) }
if ARGV.include?("fight")
  2.times { |n| threads << Thread.new { Thread.current.name = "fighter-#{n + 1}"; busy_loop } }
end
sleep 0.2
$stdout.puts "ready"
$stdout.flush
sleep
