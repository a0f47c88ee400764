# Prints "ready", waits for a line on stdin, then replaces itself with `sleep 30` (exec keeps the pid).
require "sdb"
$stdout.sync = true
require_relative "spin"
Thread.new { loop { spin(0.01) } }
puts "ready"
$stdin.gets
exec("sleep", "30")
