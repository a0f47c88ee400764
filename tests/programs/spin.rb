# Busy for `seconds` of wall time on the monotonic clock (a frame that stays on the stack while sampled).
def spin(seconds)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t
  x
end
