# A soak: everything at once that moves a Ruby process's stacks and objects under a sampler. After
# "go" on stdin: threads made and ended, fibers made and switched, methods defined by eval while the
# heap is compacted, exceptions raised deep and rescued, children forked, all in threads of their own
# at once; then Ractors. Fixed counts (ARGV[0] scales them), so the output is
# the same at any speed: one "name result" line per part, then "done".
#   ruby soak.rb SCALE [sdb]      (sdb: require the gem)
require "sdb" if ARGV[1] == "sdb"
$stdout.sync = true
scale = Integer(ARGV[0] || "1")

class Soak; end

def deep_raise(depth)
  return raise(ArgumentError, "depth #{depth}") if depth.zero?

  deep_raise(depth - 1)
end

def thread_churn(rounds)
  (1..rounds).sum { Array.new(8) { |k| Thread.new(k) { |x| (1..200).sum * x } }.sum(&:value) }
end

def fiber_churn(rounds)
  total = 0
  rounds.times do
    fibers = Array.new(10) { |k| Fiber.new { |x| y = Fiber.yield(x + k); y * 2 } }
    fibers.each_with_index { |f, k| total += f.resume(k) }
    fibers.each { |f| total += f.resume(3) }
  end
  total
end

def compact_eval(count)
  (0...count).sum do |i|
    Soak.class_eval("def m#{i}(x) = [x, #{i}].map { |y| y.to_s * 3 }.join(',').size\n")
    n = Soak.new.public_send("m#{i}", i)
    Soak.send(:remove_method, "m#{i}")
    GC.compact if (i % 25).zero?
    n
  end
end

def exceptions(count)
  (0...count).sum do |i|
    deep_raise(i % 12)
  rescue ArgumentError => e
    e.message.size
  end
end

def forks(count)
  (0...count).sum do |i|
    pid = fork { exit!(i % 7) }
    Process.wait(pid)
    $?.exitstatus
  end
end

def ractors(count)
  verbose, $VERBOSE = $VERBOSE, nil # "Ractor is experimental"
  # they compute only: threads made inside Ractors hang Ruby 3.4.5 itself now and then, with or
  # without the gem (seen here: the main thread and every Ractor waiting in the M:N scheduler, no
  # CPU); the gem's own tests make threads in Ractors (gem/test/test_ractor.rb)
  rs = Array.new(count) { |k| Ractor.new(k) { |x| (1..20_000_000).sum * x } }
  $VERBOSE = verbose
  rs.sum { |r| r.respond_to?(:value) ? r.value : r.take }
end

puts "ready"
$stdin.gets
parts = {
  "threads" => -> { thread_churn(12_000 * scale) },
  "fibers" => -> { fiber_churn(120_000 * scale) },
  "compact_eval" => -> { compact_eval(16_000 * scale) },
  "exceptions" => -> { exceptions(3_200_000 * scale) },
  "fork" => -> { forks(2000 * scale) },
}
running = parts.transform_values { |work| Thread.new(&work) }
running.each { |name, t| puts "#{name} #{t.value}" }
puts "ractors #{ractors(4 * scale)}"
puts "done"
