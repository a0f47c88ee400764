# ruby under_stackprof.rb OUT SCRIPT [ARGS...]: runs SCRIPT (as `ruby SCRIPT ARGS` would) under
# stackprof (wall, 1 ms, raw) and writes its results (Marshal) to OUT when the program exits, with
# the CLOCK_MONOTONIC ns of stackprof's start and stop (the clock of sdb's traces) as :sdb_window.
# With SDB_SIGPROF_DIR (tests/support/sigprof built there), the in-handler reference profiler runs
# beside it (1 ms, the same clock) and its samples, [[t_ns, label], ...], are :sdb_sigprof.
require "stackprof"
if (dir = ENV.delete("SDB_SIGPROF_DIR"))
  $LOAD_PATH.unshift(dir)
  require "sdb_sigprof"
  $LOAD_PATH.shift
end
out = ARGV.shift
script = ARGV.shift
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
StackProf.start(mode: :wall, interval: 1000, raw: true)
SdbSigprof.start(1000) if dir
at_exit do
  reference = dir ? SdbSigprof.stop : nil
  StackProf.stop
  t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  File.binwrite(out, Marshal.dump(StackProf.results.merge(sdb_window: [t0, t1], sdb_sigprof: reference)))
end
$0 = script
load script
