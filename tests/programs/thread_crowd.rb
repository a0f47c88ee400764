# Threads that come and go on command, for the in-context reads' timers (incontext.MAX_TIMERS: 128).
# Reads stdin lines:
#   crowd N   N threads that each work a little and sleep 10 ms, until `calm`; prints "crowd N"
#   calm      they end (joined); prints "calm"
#   churn N   N threads made and joined, 8 at a time, each alive ~2 ms; prints "churned N"
# Prints "ready" first; ends at end of input.
require "sdb"
$stdout.sync = true

def work(n) = (1..n).sum

stop = [false]
crowd = []
puts "ready"
while (line = $stdin.gets)
  cmd, arg = line.split
  case cmd
  when "crowd"
    stop[0] = false
    crowd = Array.new(Integer(arg)) { Thread.new { until stop[0]; work(2_000); sleep 0.01; end } }
    puts "crowd #{crowd.size}"
  when "calm"
    stop[0] = true
    crowd.each(&:join)
    crowd = []
    puts "calm"
  when "churn"
    Integer(arg).times.each_slice(8) { |s| s.map { Thread.new { work(500); sleep 0.002 } }.each(&:join) }
    puts "churned #{arg}"
  end
end
