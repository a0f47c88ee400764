# Eight named threads, each made a different way, for the recording test
# (tests/integration/test_record_eight_threads.py).
#
#   adopted_thread   made before `require "sdb"`: adopted at require
#   new_thread       Thread.new
#   start_thread     Thread.start
#   fork_thread      Thread.fork
#   fiber_thread     switches between two fibers (fiber_alpha_work / fiber_beta_work)
#   busy_thread      a tight loop of method calls, never sleeps
#   doomed_thread    killed by the main thread (Thread#kill) 2 s after "go"
#   raising_thread   raises 2 s after "go" (report_on_exception = false)
#
# Protocol (stdout, one line each):
#   "ready"            every thread is registered and in its named method
#   (reads "go" on stdin: the test has started recording)
#   "ended"            2 s after go: doomed_thread killed and raising_thread dead
#   (reads "spawn": the test sends it once its recording is over)
#   "spawned"          one more thread has started (and registered)
# Then the main thread parks until killed.
$stdout.sync = true
Thread.current.name = "eight_main"
started = Queue.new

def adopted_park(started)
  started << :adopted
  sleep
end

adopted = Thread.new do
  Thread.current.name = "adopted_thread"
  adopted_park(started)
end
started.pop # the adopted thread exists (and is named) before the gem loads

require "sdb"
abort "sdb is not enabled" unless Sdb.enabled?

def new_thread_park(started)
  started << :new
  sleep
end

def start_thread_park(started)
  started << :start
  sleep
end

def fork_thread_park(started)
  started << :fork
  sleep
end

def spin_for(seconds)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 < seconds
  x
end

def fiber_alpha_work
  spin_for(0.02)
end

def fiber_beta_work
  spin_for(0.02)
end

def fiber_loop(started)
  alpha = Fiber.new { loop { fiber_alpha_work; Fiber.yield } }
  beta = Fiber.new { loop { fiber_beta_work; Fiber.yield } }
  started << :fiber
  loop do
    alpha.resume
    beta.resume
  end
end

def busy_step(x)
  x + 1
end

def busy_work(started)
  started << :busy
  x = 0
  x = busy_step(x) while true
end

def doomed_park(started)
  started << :doomed
  sleep
end

def raising_wait(started, trigger)
  started << :raising
  trigger.pop
  raise "raising_thread raises on purpose"
end

trigger = Queue.new
threads = {}
threads[:new] = Thread.new { Thread.current.name = "new_thread"; new_thread_park(started) }
threads[:start] = Thread.start { Thread.current.name = "start_thread"; start_thread_park(started) }
threads[:fork] = Thread.fork { Thread.current.name = "fork_thread"; fork_thread_park(started) }
threads[:fiber] = Thread.new { Thread.current.name = "fiber_thread"; fiber_loop(started) }
threads[:busy] = Thread.new { Thread.current.name = "busy_thread"; busy_work(started) }
threads[:doomed] = Thread.new { Thread.current.name = "doomed_thread"; doomed_park(started) }
threads[:raising] = Thread.new do
  Thread.current.report_on_exception = false
  Thread.current.name = "raising_thread"
  raising_wait(started, trigger)
end
threads.size.times { started.pop }
# the parking threads are in `sleep` once their status says so
until [adopted, threads[:new], threads[:start], threads[:fork], threads[:doomed]].all? { |t| t.status == "sleep" }
  sleep 0.01
end
puts "ready"

line = $stdin.gets
exit 1 unless line && line.strip == "go"
sleep 2
threads[:doomed].kill
threads[:doomed].join
trigger << :go
begin
  threads[:raising].join
rescue RuntimeError
  nil
end
puts "ended"
# (reads "spawn") one more thread starts: on Ruby 3.1 its registration hands back the slots of
# threads that ended by a kill or an exception (3.1 sends no event for those ends)
line = $stdin.gets
exit 1 unless line && line.strip == "spawn"
spawned = Queue.new
Thread.new { spawned << 1; sleep }
spawned.pop
puts "spawned"
sleep
