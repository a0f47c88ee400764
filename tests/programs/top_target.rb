# Known hot spots for `sdb-sidecar top`: the main thread spends about 3/4 of its time in
# `top_leaf_hot` and 1/4 in `top_leaf_warm`, both called by `top_caller` (high total, no own time);
# a thread named "top_sleeper" stays blocked in `top_nap`. Prints "ready {json}" when working.
require "json"
require "sdb"
$stdout.sync = true

def top_leaf_hot(x)
  i = 0
  while i < 3000
    x = (x * 31 + i) % 1_000_003
    i += 1
  end
  x
end

def top_leaf_warm(x)
  i = 0
  while i < 1000
    x = (x * 17 + i) % 1_000_033
    i += 1
  end
  x
end

def top_caller(x)
  top_leaf_warm(top_leaf_hot(x))
end

def top_nap
  sleep
end

sleeper = Thread.new { Thread.current.name = "top_sleeper"; top_nap }
Thread.pass until sleeper.status == "sleep" # named and in top_nap before anyone looks
puts "ready " + JSON.generate({ "pid" => Process.pid, "hot_line" => 11 })
x = 1
x = top_caller(x) while true
