# ruby under_stackprof.rb OUT SCRIPT [ARGS...]: runs SCRIPT (as `ruby SCRIPT ARGS` would) under
# stackprof (wall, 1 ms, raw) and writes its results (Marshal) to OUT when the program exits, with
# the CLOCK_MONOTONIC ns of stackprof's start and stop (the clock of sdb's traces) as :sdb_window.
require "stackprof"
out = ARGV.shift
script = ARGV.shift
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
StackProf.start(mode: :wall, interval: 1000, raw: true)
at_exit do
  StackProf.stop
  t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  File.binwrite(out, Marshal.dump(StackProf.results.merge(sdb_window: [t0, t1])))
end
$0 = script
load script
