# Defines a new method by eval every few milliseconds and runs it (1 ms of work), until killed:
# every ISeq it makes is born while a recording runs (for the eBPF symbolizer to name at birth).
require "sdb"
$stdout.sync = true

require_relative "spin"

puts "ready"
i = 0
loop do
  i += 1
  eval("def sdb_evaluated_#{i}\n  spin(0.001)\nend\n")
  send("sdb_evaluated_#{i}")
  sleep 0.002
end
