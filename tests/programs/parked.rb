# A thread parked in `park_here` at a known line, and a busy worker thread.
#
#   ruby parked.rb [BACKTRACE_JSON]
#
# Prints "ready {json}" once both threads are registered and the parker sleeps; the JSON holds
# the pid, the parker's native_thread_id and the line of its `sleep`. With BACKTRACE_JSON, the
# parker's own Thread#backtrace_locations (label, path, lineno) are written there first.
# Works with or without the gem enabled (SDB_FORCE_LAYOUT tests): it only reports Sdb.enabled?.
require "json"
require "sdb"
$stdout.sync = true
Thread.current.name = "parked_main"

PARK_LINE = __LINE__ + 3 # the line of the `sleep` below
def park_here(started)
  started << :parker
  sleep
end

def work_step(x)
  x * 3 % 1_000_003
end

def work_loop(started)
  started << :worker
  x = 1
  x = work_step(x) while true
end

started = Queue.new
parker = Thread.new { Thread.current.name = "parker"; park_here(started) }
worker = Thread.new { Thread.current.name = "worker"; work_loop(started) }
2.times { started.pop }
sleep 0.01 until parker.status == "sleep"

if ARGV[0]
  locs = parker.backtrace_locations.map { |l| { "label" => l.label, "base_label" => l.base_label, "path" => l.path, "line" => l.lineno } }
  File.write(ARGV[0], JSON.generate(locs))
end
puts "ready " + JSON.generate({ "pid" => Process.pid, "parker_tid" => parker.native_thread_id,
                                "worker_tid" => worker.native_thread_id, "park_line" => PARK_LINE,
                                "path" => __FILE__, "sdb_enabled" => Sdb.enabled? })
sleep
