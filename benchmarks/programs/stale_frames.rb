# The worst case for frames left behind (benchmarks/stale_frames.py): `spin` calls a chain three
# methods deep (top_a -> mid_a -> leaf_a), a C function that calls nothing, and a Ruby method that
# calls nothing (flat_b), over and over, as fast as it can. Every real stack is known: any frame
# above flat_b or the C function, or a chain method under anything but its one caller, is a
# stack that never existed.   ruby stale_frames.rb [sdb]
require "sdb" if ARGV[0] == "sdb"
$stdout.sync = true

def leaf_a(x) = x + 1
def mid_a(x) = leaf_a(x) + 1
def top_a(x) = mid_a(x) + 1
def flat_b(x) = x - 1

def spin
  o = Object.new
  n = 0
  while true
    n = top_a(n)
    n -= 2 if o.instance_variable_defined?(:@none)
    n = flat_b(n) - 2
  end
end

puts "ready"
spin
