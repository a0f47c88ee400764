# first_sample: prints the monotonic time of its first line (the sdb gem, loaded by -rsdb or by
# `sdb-sidecar record` through RUBYOPT, has made its registry by then), then works SECONDS (default
# 0.5) in a method calling (2..n).each, then exits. With "wait": prints only "ready", works until stdin closes.
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
$stdout.sync = true
puts "first_line #{t0}" unless ARGV[0] == "wait"
require "sdb"    # loaded already under `record`: a no-op there

def crunch(n)
  (2..n).each { |i| i * i }
end

if ARGV[0] == "wait"
  puts "ready"
  Thread.new { $stdin.read; exit!(0) }
  loop { crunch(2000) }
else
  deadline = t0 + (Float(ARGV[0] || "0.5") * 1e9).to_i
  crunch(2000) while Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) < deadline
end
