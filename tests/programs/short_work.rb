# short_work.rb KIND [SECONDS|wait]: what a new user records first.
#   each:  a method calling (2..n).each { ... } over and over
#   sleep: loop { sleep }
# With SECONDS (default 1): prints "start <monotonic ns>", works that long, prints "end <ns>", exits.
# With "wait": prints "ready", works until stdin closes.
require "sdb"
$stdout.sync = true

def each_work(n)
  (2..n).each { |i| i * i }
end

def work(kind)
  case kind
  when "each" then each_work(2000)
  when "sleep" then sleep 0.01
  end
end

kind = ARGV[0]
if ARGV[1] == "wait"
  Thread.new { $stdin.read; exit!(0) }
  puts "ready"
  loop { work(kind) }
end
now = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
t0 = now.call
deadline = t0 + (Float(ARGV[1] || "1") * 1e9).to_i
puts "start #{t0}"
loop do
  work(kind)
  break if now.call >= deadline
end
puts "end #{now.call}"
