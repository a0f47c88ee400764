# A frame the thread left, still in memory above the C function it has called since: `park` calls
# top_a -> mid_a, they return, then it sleeps in Kernel#sleep, a C function whose frame takes top_a's
# old slot, with mid_a's frame still intact above it. tests/integration/test_call_return.py stops this
# process and makes that moment look like a copy the sampler can meet: the frame pointer at mid_a's
# frame, and the C frame's pc not 0 (YJIT leaves a C frame's pc as the slot held it; a frame copied
# while the interpreter writes it shows the C function's ISeq 0 beside the old frame's pc).
#   ruby left_above_c.rb
require "sdb"
$stdout.sync = true

def mid_a(x) = x + 1
def top_a(x) = mid_a(x) + 1

def park
  top_a(1)
  sleep
end

puts "ready"
park
