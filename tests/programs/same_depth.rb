# A method's frame replaced at once, at the same depth, by frames of other kinds: a class body (`class << obj`:
# a cref where a method frame holds its entry: no method) and a C function (its own entry there),
# each time at another depth (so that a read copies the frames first and their env words after,
# in a second call).
#   ruby same_depth.rb [sdb]
require "sdb" if ARGV[0] == "sdb"
$stdout.sync = true

SLOT = Object.new

def brief(a) = a

def work
  brief(1)
  class << SLOT; end
  Integer.sqrt(4)
  brief(2)
end

def down(n) = n.zero? ? work : down(n - 1)

puts "ready"
depths = [3, 40, 11, 70, 25, 55, 1, 90]
i = 0
loop do
  10.times { down(depths[i % depths.size]) }
  i += 1
end
