# A method a sample sees, which then leaves every stack: tests/integration/test_name_read_after_the_frame_left.py
# points its ISeq's path at another String of the program's between the sample and the read, as a sweep
# leaves a dead ISeq's location under GC (issue 44). Prints "ready ADDR" (the String's address: a
# VALUE); a line on stdin leaves `victim`, then "left"; `parked` waits for stdin's end.
require "sdb"
require "fiddle"
$stdout.sync = true
JUNK = +"1299"                        # a String of the program's, not a file's name
eval("def victim; $stdin.gets; end")
def parked = $stdin.read
puts "ready #{Fiddle.dlwrap(JUNK)}"
victim
puts "left"
parked
