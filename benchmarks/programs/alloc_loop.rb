# alloc_loop.rb MODE WORKLOAD N: one run of benchmarks/alloc_hook_cost.py (issue 42).
# MODE: none | removed (the hook installed and removed again before the loop) | skip (a NEWOBJ hook
# counting a geometric skip down by one per object) | sample (by slot bytes, mean 512 KiB, copying 64
# frames at a sample) | heap (sample, and each sampled object tracked until a FREEOBJ hook sees it
# freed: the live-heap design). WORKLOAD: micro (Object.new in a while loop) | mixed (a string/array/hash
# method mix with some computation between). Prints one JSON line: wall and CPU seconds of the loop,
# the hook's calls and samples, the allocations GC.stat counted.
require "json"
require "alloc_hook" if ARGV[0] != "none"

mode, workload, n = ARGV[0], ARGV[1], Integer(ARGV[2])

def micro(n)
  i = 0
  while i < n
    Object.new
    i += 1
  end
end

def words(i)
  "w#{i % 97}-#{i}"
end

def row(i)
  a = [i, words(i), i * 2]
  a.map { |x| x.to_s }.join(",")
end

def totals(i)
  h = { id: i, name: words(i), tags: [i % 3, i % 5] }
  h[:name].upcase.size + h[:tags].sum
end

def score(i)
  s = 0
  j = 0
  while j < 20
    s += (i ^ j) & 7
    j += 1
  end
  s
end

def mixed(n)
  i = 0
  acc = 0
  while i < n
    acc += row(i).size + totals(i) + score(i)
    i += 1
  end
  acc
end

case mode
when "none" then nil
when "removed" then AllocHook.install(1, 512); AllocHook.remove
when "skip" then AllocHook.install(1, 1 << 40) # never fires: the callback's floor
when "sample" then AllocHook.install(2, 512 * 1024)
when "heap" then AllocHook.install(3, 512 * 1024)
else abort "alloc_loop.rb: unknown mode #{mode} (none, removed, skip, sample, heap)"
end
abort "alloc_loop.rb: unknown workload #{workload} (micro, mixed)" unless %w[micro mixed].include?(workload)

GC.start
a0 = GC.stat(:total_allocated_objects)
w0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
c0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
workload == "micro" ? micro(n) : mixed(n)
c1 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
w1 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
allocs = GC.stat(:total_allocated_objects) - a0
calls, samples, = defined?(AllocHook) ? AllocHook.stats : [0, 0]
AllocHook.remove if defined?(AllocHook)
puts JSON.generate(wall: w1 - w0, cpu: c1 - c0, allocs: allocs, calls: mode == "removed" ? 0 : calls, samples: samples)
