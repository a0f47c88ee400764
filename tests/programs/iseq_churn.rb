# ISeq addresses reused and moved while recorded. stdin "go\n" starts; prints "round {json}" per
# method run (its name and monotonic window, the samples' clock; 2 ms apart), then "done".
#   reuse:   each round evals 8 methods, runs them, removes them and collects: freed ISeq slots are
#            taken again by the next rounds' ISeqs, so one address names several methods in turn
#   compact: evals methods, runs them, compacts the heap so that every movable object moves, runs them
#            again (one "round" line per run: the first half before the compaction, the second after)
require "sdb"
require "json"
$stdout.sync = true

require_relative "spin"

def run(name, seconds)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  send(name, seconds)
  t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  puts "round " + JSON.generate({ "name" => name, "t0" => t0, "t1" => t1 })
  # 2 ms of `run` alone before the next round: a sample's time and the copy of its frames are a few
  # us apart at best (more when the sidecar is preempted), so back-to-back rounds (~5 us apart)
  # would make the test depend on that; a sample in the gap has none of the rounds' methods
  spin(0.002)
end

mode = ARGV[0] || "reuse"
puts "ready #{Process.pid}"
$stdin.gets
case mode
when "reuse"
  # batches of 5 rounds, as long as stdin says "more" (the test stops once it saw an address reused)
  round = 0
  loop do
    5.times do
      names = (0...8).map { |i| "sdb_churn_#{round}_#{i}" }
      eval(names.map { |n| "def #{n}(s)\n  spin(s)\nend\n" }.join, TOPLEVEL_BINDING, "/sdb/churn.rb", 1)
      names.each { |n| run(n, 0.012) }
      names.each { |n| Object.send(:remove_method, n) }
      GC.start
      round += 1
    end
    puts "batch"
    break unless $stdin.gets == "more\n"
  end
when "compact"
  names = (0...30).map { |i| "sdb_moved_#{i}" }
  names.each { |n| eval("def #{n}(s)\n  spin(s)\nend\n", TOPLEVEL_BINDING, "/sdb/moved.rb", 1) }
  names.each { |n| run(n, 0.01) }
  # Not GC.compact: it moves objects from the heap's last pages into the free slots of its first ones
  # until the two cursors meet, the pages ordered by how many slots are pinned (the C stack's
  # conservative references decide that), so whether these methods' ISeqs are past the meeting point
  # is chance (measured on 4.0.5: 5 of the 30 moved in most runs, none in some). The same compaction
  # (gc_move) run by verify_compaction_references first adds empty pages enough for every object and
  # puts them first: every movable object moves (gc/default/default.c; Ruby's own compaction tests
  # rely on it). expand_heap is 3.2's name for 3.1's double_heap.
  GC.verify_compaction_references(toward: :empty, **(RUBY_VERSION >= "3.2" ? { expand_heap: true } : { double_heap: true }))
  puts "compacted"
  names.each { |n| run(n, 0.03) }
end
puts "done"
sleep
