# Benchmark target: THREADS threads (the main thread is one of them), each
# recursing DEPTH method calls deep, then at the leaf:
#   park   sleep forever (the stack never changes)
#   busy   loop over small method calls forever (the stack top changes constantly)
#   mixed  ~5 ms of busy work, ~5 ms of sleep, unwind, recurse again to a new
#          depth in DEPTH..DEPTH+20 (stacks change all the time)
# Prints "ready" once every thread has reached its leaf. Runs until killed (no
# extra thread of its own: every Ruby thread is one of the THREADS measured).
# usage: ruby stacks.rb THREADS DEPTH MODE
require "sdb"

THREADS = Integer(ARGV.fetch(0, "8"))
DEPTH = Integer(ARGV.fetch(1, "50"))
MODE = ARGV.fetch(2, "park")
LOCK = Mutex.new
$ready = 0

def recurse(n, &leaf)
  n > 1 ? recurse(n - 1, &leaf) : leaf.call
end

def step(x) = (x * 31 + 7) & 0xffff
def twice(x) = step(step(x))

def spin(seconds)
  x = 0
  stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  x = twice(x) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop
  x
end

def arrived
  LOCK.synchronize do
    $ready += 1
    if $ready == THREADS
      puts "ready"
      $stdout.flush
    end
  end
end

def leaf
  arrived
  case MODE
  when "park" then sleep
  when "busy"
    x = 0
    loop { x = twice(x) }
  end
end

def mixed_worker
  arrived
  rng = Random.new
  loop do
    recurse([DEPTH - caller_locations(0).size - 4, 1].max + rng.rand(21)) do
      spin(0.005)
      sleep(0.005)
    end
  end
end

# DEPTH counts every frame the sampler sees: the frames already under `body`
# (caller_locations), the recursion, then the block, `leaf` and `sleep` (park: 3)
# or the block, `leaf`, `loop`, its block, `twice`, `step` (busy: 6, the top
# two come and go)
def body
  return mixed_worker if MODE == "mixed"
  recurse([DEPTH - caller_locations(0).size - (MODE == "busy" ? 6 : 3), 1].max) { leaf }
end

(THREADS - 1).times { |i| Thread.new { Thread.current.name = "worker-#{i + 1}"; body } }
body
