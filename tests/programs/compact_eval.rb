# GC.compact every 10 ms while methods are defined with class_eval strings and run: ISeqs, their
# labels and paths are moved, and the freed slots taken by new strings (numbers, eval sources).
# Prints "ready", runs until stdin closes.
require "sdb"
$stdout.sync = true
Thread.new { $stdin.read; exit!(0) }
class Churn; end
puts "ready"
i = 0
last = Process.clock_gettime(Process::CLOCK_MONOTONIC)
loop do
  Churn.class_eval("def m#{i}(x) = [x, #{i}].map { |y| y.to_s * 3 }.join(',')\n")
  Churn.new.public_send("m#{i}", i)
  Churn.send(:remove_method, "m#{i - 50}") if i >= 50
  junk = Array.new(100) { |k| (i * 100 + k).to_s }
  now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  if now - last >= 0.01
    GC.compact
    last = now
  end
  i += 1
end
