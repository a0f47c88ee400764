# A method whose env Ruby moved to the heap: its block became a Proc (a method taking &block), so
# its control frame's ep points into the heap, not the VM stack. The thread runs Ruby below it,
# without end. Prints "ready" once running.
require "sdb"

# the block kept as a Proc object (only calling `blk` would not make one: Ruby passes a proxy)
def takes_block(&blk)
  $kept = blk
  blk.call
end

def spin_below
  x = 0
  loop { x += 1 }
end

def with_escaped_env
  local = 42
  takes_block { spin_below + local }
end

def run_it = with_escaped_env

$stdout.puts "ready"
$stdout.flush
run_it
