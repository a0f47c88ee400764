# The recording every output format is tested on (tests/format_recording.py): four named
# threads doing different, recognisable things, so each format can be checked for names, lines,
# threads and states.
#
#   format_main      the main thread, waiting on a Queue (blocked)
#   format_cruncher  busy: format_crunch_loop -> format_crunch_step (running / waiting for the GVL)
#   format_mixer     busy: format_mix_loop -> format_mix_step (competes with the cruncher for the GVL)
#   format_sleeper   format_nap: sleeps in short naps (blocked, wakes up now and then)
#
# Prints "ready" once every thread is in its method, then runs until killed.
require "sdb"
$stdout.sync = true
abort "sdb is not enabled" unless Sdb.enabled?
Thread.current.name = "format_main"

def format_crunch_step(x)
  (x * 31 + 7) % 1_000_003
end

def format_crunch_loop(started)
  started << :cruncher
  x = 1
  x = format_crunch_step(x) while true
end

def format_mix_step(a)
  a.rotate!(1)
  a[0] + a[-1]
end

def format_mix_loop(started)
  started << :mixer
  a = (1..16).to_a
  format_mix_step(a) while true
end

def format_nap(started)
  started << :sleeper
  loop { sleep 0.02 }
end

started = Queue.new
Thread.new { Thread.current.name = "format_cruncher"; format_crunch_loop(started) }
Thread.new { Thread.current.name = "format_mixer"; format_mix_loop(started) }
Thread.new { Thread.current.name = "format_sleeper"; format_nap(started) }
3.times { started.pop }
puts "ready"
Queue.new.pop
