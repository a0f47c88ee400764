# GC.compact every 10 ms in a thread while the main thread defines methods with class_eval strings,
# define_method and Class.new, calls them, evals "#{k} + 1" and removes them (issue 44: ISeq addresses
# reused, strings freed and their slots refilled). Prints "ready", runs until stdin closes.
require "sdb"
$stdout.sync = true
Thread.new { $stdin.read; exit!(0) }
Thread.new { loop { sleep 0.01; GC.compact } }
class Churn; end
puts "ready"
k = 0
loop do
  Churn.class_eval("def m_#{k}(x); y = x * 47 + #{k}; [1,2,3].map { |z| z + y }.sum; end")
  Churn.define_method("dm_#{k}") { |x| [x, k].map { |y| y.to_s }.join }
  c = Class.new { define_method(:run) { |x| x * 2 } }
  o = Churn.new
  o.public_send("m_#{k}", k); o.public_send("dm_#{k}", k); c.new.run(k)
  eval("#{k} + 1")
  junk = Array.new(50) { |j| (k * 50 + j).to_s }
  if k >= 30
    Churn.send(:remove_method, "m_#{k - 30}"); Churn.send(:remove_method, "dm_#{k - 30}")
  end
  k += 1
end
