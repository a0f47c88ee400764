# ISeqs created in a burst far above the eBPF symbolizer's budget, then slowly. stdin:
#   "burst SECONDS\n": evals methods sdb_burst_<i> one eval each for SECONDS, then runs 20 of them
#      spread over the burst (20 ms each); prints "burst {json}": per method run, its name and the
#      monotonic window (ns, the samples' clock) in which it was created, "slept_ns": how long
#      this thread slept (off CPU, not waiting for one) while it created them, and
#      "longest_sleep_ns": the longest of those sleeps within one turn of its loop (one eval)
#   "burst_until PATH\n": the same, until the file PATH exists
#   "slow\n": evals 5 methods sdb_slow_<i>, one every 0.1 s, then runs each (50 ms); prints "slow {json}"
require "sdb"
require "json"
$stdout.sync = true

require_relative "spin"

def now_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

# wall time minus time on a CPU minus time waiting for one: time asleep (schedstat's second field,
# the run-queue delay, in ns; the thread's own CPU clock is exact where schedstat's run time lags)
def asleep_ns
  wait = File.read("/proc/thread-self/schedstat").split[1].to_i
  now_ns - Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID, :nanosecond) - wait
end

def define(name)
  t0 = now_ns
  eval("def #{name}(s)\n  spin(s)\nend\n", TOPLEVEL_BINDING, "/sdb/burst.rb", 1)
  { "name" => name, "born0" => t0, "born1" => now_ns }
end

puts "ready #{Process.pid}"
while (line = $stdin.gets)
  cmd, arg = line.split
  case cmd
  when "burst", "burst_until"
    # burst SECONDS, or burst_until PATH: until that file exists (looked for every 100 methods)
    born = []
    done = if cmd == "burst"
             finish = now_ns + (Float(arg) * 1e9).to_i
             -> { now_ns >= finish }
           else
             -> { born.size % 100 == 0 && File.exist?(arg) }
           end
    slept = last = asleep_ns
    longest = 0
    until done.call
      born << define("sdb_burst_#{born.size}")
      now = asleep_ns
      longest = now - last if now - last > longest
      last = now
    end
    slept = last - slept
    picked = (0...20).map { |k| born[(born.size - 1) * k / 19] }
    picked.each { |m| send(m["name"], 0.02) }
    puts "burst " + JSON.generate({ "count" => born.size, "ran" => picked, "slept_ns" => slept,
                                    "longest_sleep_ns" => longest })
  when "slow"
    picked = (0...5).map { |k| m = define("sdb_slow_#{k}"); sleep 0.1; m }
    picked.each { |m| send(m["name"], 0.05) }
    puts "slow " + JSON.generate({ "ran" => picked })
  end
end
