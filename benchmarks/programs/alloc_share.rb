# alloc_share.rb SCENARIO THREADS SECONDS HZ: the hook-free design measured (issue 42, benchmarks/alloc_share.py).
# Four methods with known allocations run in THREADS threads for SECONDS; AllocProbe's native thread
# reads the VM's allocation counter at HZ and gives each change to the method the GVL holder is in.
# The truth is the program's own count: calls of each method times its allocations per call,
# measured once alone with GC.stat (GC off) before the threads start. Also each thread's allocations
# counted at GVL hand-overs (AllocProbe.thread_counts) beside its truth. SCENARIO: bursty (calls of ~0.01-0.3 ms,
# interleaved: far shorter than a tick) | steady (each call repeats its body for ~20-50 ms).
# Prints one JSON line.
require "json"
require "alloc_hook"

scenario, nthreads, seconds, hz = ARGV[0], Integer(ARGV[1]), Float(ARGV[2]), Integer(ARGV[3])
REPEAT = { "bursty" => 1, "steady" => 150 }.fetch(scenario) { abort "alloc_share.rb: scenario bursty or steady" }
LABELS = %w[other objects strings arrays compute].freeze

# Four methods from one template, not one method taking a block: each allocates in its own frame
# (what an allocation profile gives the objects to), with no block call between the loop and the
# allocation. Each: label index, the inner loop's count, and its body (compute: integers only).
{ objects: [1, 300, "Object.new"],
  strings: [2, 100, 'String.new("abcdefgh", capacity: 200)'],
  arrays: [3, 50, "Array.new(20, i)"],
  compute: [4, 4000, "s += (i ^ k) & 7"] }.each do |name, (label, count, body)|
  TOPLEVEL_BINDING.eval(<<~RUBY, __FILE__, __LINE__ + 1)
    def #{name}(r)
      AllocProbe.enter(#{label})
      s = 0
      k = 0
      while k < r
        i = 0
        while i < #{count}
          #{body}
          i += 1
        end
        k += 1
      end
      AllocProbe.enter(0)
      s
    end
  RUBY
end

METHODS = %i[objects strings arrays compute].freeze
# per thread: how many calls of each method one turn of its loop makes (different mixes per thread)
MIXES = [[1, 1, 1, 2], [0, 3, 0, 1], [2, 0, 1, 3], [1, 1, 1, 1]].freeze

per_call = METHODS.to_h do |m|
  send(m, REPEAT)
  GC.disable
  a = GC.stat(:total_allocated_objects)
  send(m, REPEAT)
  n = GC.stat(:total_allocated_objects) - a
  GC.enable
  [m, n]
end

calls = Array.new(nthreads) { Hash.new(0) }
stop = false
AllocProbe.start(hz)
threads = Array.new(nthreads) do |t|
  Thread.new do
    mix = MIXES[t % MIXES.size]
    mine = calls[t]
    until stop
      METHODS.each_with_index do |m, j|
        mix[j].times do
          send(m, REPEAT)
          mine[m] += 1
        end
      end
    end
  end
end
sleep seconds
stop = true
threads.each(&:join)
sampled, ticks, unattributed = AllocProbe.stop
truth = METHODS.to_h { |m| [m, calls.sum { |c| c[m] } * per_call[m]] }
thread_truth = calls.map { |c| METHODS.sum { |m| c[m] * per_call[m] } }
puts JSON.generate(per_call: per_call, truth: truth, sampled: METHODS.each_with_index.to_h { |m, j| [m, sampled[j + 1]] },
                   other: sampled[0], ticks: ticks, unattributed: unattributed, ruby: RUBY_VERSION,
                   thread_truth: thread_truth, thread_counted: AllocProbe.thread_counts(threads))
