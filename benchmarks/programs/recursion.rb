# cpu_micro's target. ruby recursion.rb PROFILER WORKLOAD SIZE [STACKPROF_OUT]
#   PROFILER  none (sdb not loaded) | sdb (require "sdb") | stackprof-wall | stackprof-cpu (1 ms, raw off)
#   WORKLOAD  loop: 150 frames of recursion around a tight loop of SIZE iterations, repeated 20 times
#             threads: SIZE times Thread.new { }.join
#             alloc: SIZE times a 20-string Array kept in a ring of 20,000 (GC runs all the time)
#             fork: SIZE times fork { exit!(0) } and wait for it (a fork-per-job server's loop)
#             fork_consolidated: the same, with malloc's fastbins consolidated before each fork (a
#                    4 KiB malloc and free, through Fiddle, loaded in every configuration): Ruby 3.1's
#                    child makes a large allocation (its PRNG state) that consolidates the fastbins
#                    it inherited, a copy-on-write fault on every page they lie on; how many there
#                    are depends on the heap's layout, which swung the fork workload's ratio by
#                    +-40 %, not on what the gem does at fork
#             spans: SIZE units of work, each Sdb.label(endpoint:, request_id:) { } (a request's begin
#                    and end); without sdb a Sdb.label that only yields stands in for it. The
#                    objects allocated during the loop are printed after the result ("allocated N")
# Prints "ready <pid>", waits for a line on stdin, runs the workload once and prints
# "result <wall seconds> <CPU seconds>" (around the workload only), then exits when stdin closes.
profiler, workload, size, stackprof_out = ARGV
size = Integer(size)
require "sdb" if profiler == "sdb"
require "stackprof" if profiler.start_with?("stackprof")

require_relative "../../tests/programs/descend"

DEPTH = 150

def loop_workload(iterations)
  20.times { descend(DEPTH - 2, iterations / 20) } # -2: main and loop_workload's block are frames too
end

def threads_workload(count)
  count.times { Thread.new {}.join }
end

FORKED = [] # the fork workloads' children, said after the result: the registries they leave are counted

def fork_workload(count)
  count.times { FORKED << Process.wait(fork { exit!(0) }) }
end

def fork_consolidated_workload(count)
  count.times do
    Fiddle.free(Fiddle.malloc(4096).to_i) # glibc: a large-bin request consolidates the fastbins first
    FORKED << Process.wait(fork { exit!(0) })
  end
end

unless defined?(Sdb)
  module Sdb
    def self.label(endpoint:, request_id: nil) = yield   # the app without sdb: the block runs, nothing else
  end
end

ENDPOINT = "ProductsController#index"
REQUEST_ID = "3f1c2a9e-5d4b-4e7a-9c1d-0b2a6f8e7d55"

def spans_workload(count)
  i = 0
  while i < count
    Sdb.label(endpoint: ENDPOINT, request_id: REQUEST_ID) { i += 1 }
  end
end

def alloc_workload(count)
  keep = Array.new(20_000)
  count.times { |i| keep[i % keep.size] = Array.new(20) { |k| "s#{k}" } }
end

work = case workload
       when "threads" then -> { threads_workload(size) }
       when "alloc" then -> { alloc_workload(size) }
       when "fork" then -> { fork_workload(size) }
       when "fork_consolidated" then require("fiddle") && -> { fork_consolidated_workload(size) }
       when "spans" then -> { spans_workload(size) }
       else -> { loop_workload(size) }
       end
spans_workload(10_000) if workload == "spans"  # warm: Ruby's caches, the endpoint interned
$stdout.puts "ready #{Process.pid}"
$stdout.flush
$stdin.gets
allocated0 = GC.stat(:total_allocated_objects)
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
c0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
if profiler.start_with?("stackprof")
  mode = profiler == "stackprof-wall" ? :wall : :cpu
  StackProf.run(mode: mode, interval: 1000, raw: false, out: stackprof_out, &work)
else
  work.call
end
elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - c0
allocated = GC.stat(:total_allocated_objects) - allocated0
$stdout.puts "result #{elapsed} #{cpu}"
$stdout.puts "allocated #{allocated}" if workload == "spans"
$stdout.puts "forked #{FORKED.join(" ")}" if workload.start_with?("fork")
$stdout.flush
$stdin.gets # exit when stdin closes (a profiler attached from outside ends its recording first)
