# A loop whose split of wall time is known from its own clock: Array#sort of 20,000 integers (a C
# function that calls no Ruby and checks no interrupt) then Object#count_up (Ruby), in turn.
#   ruby sort_and_count.rb [sdb]    prints "ready", waits for a line on stdin, then loops SECONDS
#                                   (env, default 5) and prints one JSON line: the window (monotonic
#                                   ns), the time measured in each part, and, with SDB_SIGPROF_DIR
#                                   (tests/support/sigprof built there), the in-handler reference's
#                                   samples in the window: [[t_ns, label], ...]
require "sdb" if ARGV[0] == "sdb"
require "json"
if (dir = ENV["SDB_SIGPROF_DIR"])
  $LOAD_PATH.unshift(dir)
  require "sdb_sigprof"
end
$stdout.sync = true
N = 20_000
ARR = Array.new(N) { |i| (i * 7919) % 20_011 }
def sort_part = ARR.sort
def count_up(n) = (i = 0; x = 0; while i < n; x += i; i += 1; end; x)
clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
puts "ready"
$stdin.gets
spent = { "Array#sort" => 0, "Object#count_up" => 0 }
SdbSigprof.start(1000) if dir
t0 = clock.()
stop = t0 + (Float(ENV.fetch("SECONDS", "5")) * 1e9).to_i
while (a = clock.()) < stop
  sort_part
  b = clock.()
  count_up(N)
  c = clock.()
  spent["Array#sort"] += b - a
  spent["Object#count_up"] += c - b
end
t1 = clock.()
reference = dir ? SdbSigprof.stop : nil
puts JSON.generate({ "window" => [t0, t1], "spent_ns" => spent, "reference" => reference })
$stdin.gets
