# ISeq addresses reused and moved while recorded. stdin "go\n" starts; prints "round {json}" per
# method run (its name and monotonic window, the samples' clock; 2 ms apart), then "done".
#   reuse:   each round evals 8 methods, runs them, removes them and collects: freed ISeq slots are
#            taken again by the next rounds' ISeqs, so one address names several methods in turn
#   compact: evals methods, runs them, GC.compact (moves them), runs them again
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
  junk = Array.new(50_000) { Object.new } # freed below: holes low in the heap for the compactor to fill
  names = (0...30).map { |i| "sdb_moved_#{i}" }
  names.each { |n| eval("def #{n}(s)\n  spin(s)\nend\n", TOPLEVEL_BINDING, "/sdb/moved.rb", 1) }
  names.each { |n| run(n, 0.01) }
  junk = nil
  GC.start
  GC.compact
  puts "compacted"
  names.each { |n| run(n, 0.03) }
end
puts "done"
sleep
