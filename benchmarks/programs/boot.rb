# A boot: loads FILES generated files (a class with 5 methods and a block each), then evals METHODS
# methods one eval each. Prints "ready", waits for a line on stdin (the sidecar attaches first),
# boots, prints "boot_s <seconds>" (monotonic, the boot alone) and exits.
#   ruby boot.rb DIR FILES METHODS
require "sdb"
$stdout.sync = true
dir, files, methods = ARGV[0], Integer(ARGV[1]), Integer(ARGV[2])
puts "ready #{Process.pid}"
$stdin.gets
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
files.times { |i| require File.join(dir, "f#{i}.rb") }
methods.times { |i| eval("def evaluated_#{i}(x)\n  x + #{i}\nend\n", TOPLEVEL_BINDING, "(boot eval)", i) }
puts "boot_s #{Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0}"
