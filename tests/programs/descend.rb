# Deep stacks: `descend(depth, iterations)` recurses `depth` frames of itself, then spins a tight
# loop of `iterations` at the bottom. Required by deep_churn.rb (a test's target) and by
# benchmarks/programs/recursion.rb (cpu_micro's).

def descend(depth, iterations)
  return spin(iterations) if depth.zero?

  descend(depth - 1, iterations)
end

def spin(iterations)
  i = 0
  x = 0
  while i < iterations
    x += i & 7
    i += 1
  end
  x
end
