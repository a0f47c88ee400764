# A method a sample sees, which then leaves every stack: tests/integration/test_name_read_in_a_sweep.py
# arranges, between the sample and the sidecar's read, what a lazy GC sweep leaves of a dead ISeq (its
# path's slot holding another String of the program's, the ISeq itself not swept yet, the sweep in
# progress). Prints "ready ADDR" (the String's address); a line on stdin leaves `victim`, then "left";
# `parked` waits for stdin's end. Nothing here allocates while parked: no GC runs then.
require "sdb"
require "objspace"
$stdout.sync = true
JUNK = +"1299"                        # a String of the program's, not a file's name
eval("def victim; $stdin.gets; end")
def parked = $stdin.read
puts "ready #{ObjectSpace.dump(JUNK)[/"address":"(0x\h+)"/, 1].to_i(16)}"
victim
puts "left"
parked
