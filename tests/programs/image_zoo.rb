# The program whose memory image tests/unit/memimage/ holds (tests/support/memimage.py capture):
# threads parked under Ruby methods, blocks, C functions calling blocks (each, map, synchronize,
# Integer#times), a class body, a singleton method and an instance_eval; prints "ready" once all
# are parked, then sleeps until killed.
require "sdb"
$stdout.sync = true
Thread.current.name = "zoo_main"
parked = Queue.new

class Shelf
  def self.open(parked, &blk) = new.stack(parked, &blk)

  def stack(parked)
    [1, 2].each_with_index do |_, i|
      next if i.zero?
      return yield(parked)
    end
  end
end

module Waiting
  def self.on_queue(parked)
    q = Queue.new
    parked << :queue
    [q].map { |x| x.pop }
  end
end

def in_mutex(parked)
  m = Mutex.new
  m.synchronize { 1.times { parked << :mutex; sleep } }
end

def nested_sleep(parked, depth)
  return instance_eval { parked << :deep; sleep } if depth.zero?
  nested_sleep(parked, depth - 1)
end

Thread.new { Thread.current.name = "zoo_shelf"; Shelf.open(parked) { |p| p << :shelf; sleep } }
Thread.new { Thread.current.name = "zoo_queue"; Waiting.on_queue(parked) }
Thread.new { Thread.current.name = "zoo_mutex"; in_mutex(parked) }
Thread.new { Thread.current.name = "zoo_deep"; nested_sleep(parked, 30) }
4.times { parked.pop }
sleep 0.2 # every thread inside its sleep or pop
puts "ready"
sleep
