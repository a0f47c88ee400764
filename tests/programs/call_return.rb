# Calls in and out at a high rate, in a shape whose every real stack is known: `spin` calls a chain
# three methods deep (top_a -> mid_a -> leaf_a), returns, then calls a C function that calls no Ruby
# method (instance_variable_defined?, which YJIT does not replace by inline code), over and over;
# with `flat`, also a one-line Ruby method that calls nothing (flat_b: benchmarks/stale_frames.py).
# A sample showing any frame above the C function or flat_b, or a chain method under anything but
# its one caller, is a stack that never existed.
#   ruby call_return.rb [sdb] [flat]
require "sdb" if ARGV[0] == "sdb"
$stdout.sync = true

def leaf_a(x) = x + 1
def mid_a(x) = leaf_a(x) + 1
def top_a(x) = mid_a(x) + 1
def flat_b(x) = x - 1

def spin(flat)
  o = Object.new
  n = 0
  while true
    n = top_a(n)
    n -= 2 if o.instance_variable_defined?(:@none)
    n = flat ? flat_b(n) - 2 : n - 3
  end
end

puts "ready"
spin(ARGV.include?("flat"))
