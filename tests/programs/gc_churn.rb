# GC target. `ruby gc_churn.rb churn`: a thread "churner" allocates without pause (minor GCs run
# all the time, on that thread); `ruby gc_churn.rb sleep`: the same thread sleeps (no GC).
# Prints "ready {json}" once the thread runs.
require "json"
require "sdb"
$stdout.sync = true
MODE = ARGV.fetch(0, "churn")
started = Queue.new

def churn
  keep = []
  loop do
    keep << Array.new(64) { "x" * 64 }
    keep.shift if keep.size > 64
  end
end

th = Thread.new do
  Thread.current.name = "churner"
  started << true
  MODE == "churn" ? churn : sleep
end
started.pop
puts "ready " + JSON.generate({ "pid" => Process.pid, "gc_count" => GC.count })
th.join
