# A thread whose last two frames ZJIT pushed over slots the interpreter last filled with other methods
# (tests/integration/test_zjit_stale_frames.py). Under ZJIT's lightweight frames (Ruby 4.1+), a frame
# ZJIT pushes writes no ISeq or pc into its control frame (zjit/src/codegen.rs: gen_push_frame):
# they stay those of the frame the slot held before, and the real ones are in its JIT frame record.
#
# The thread "stale" calls zs_step(0) (which calls zs_wait, which calls sleep) 2,000 times, enough for
# ZJIT to compile both and to call zs_wait from zs_step's code directly. Then, from the same depth,
# the interpreter runs zs_decoy_outer once, which calls zs_decoy, which calls zs_decoy_leaf: the
# slots of zs_step, zs_wait and sleep now hold those three. Then zs_step runs once more and zs_wait
# sleeps for 11 days: its control frame still says zs_decoy (and sleep's, zs_decoy_leaf). A reader
# that trusts the control frame names the decoys; the right stack is zs_step > zs_wait > sleep.
# Prints "ready" once the thread sleeps in that last call.
require "sdb"
$stdout.sync = true

def zs_wait(seconds)
  sleep(seconds)                  # one call site, an Integer each time: ZJIT's code never exits here
end

def zs_step(seconds)
  zs_wait(seconds)
  1
end

def zs_decoy_leaf = 2

def zs_decoy
  zs_decoy_leaf
  3
end

def zs_decoy_outer
  zs_decoy
  4
end

$zs_last = false
stale = Thread.new do
  Thread.current.name = "stale"
  2000.times { zs_step(0) }
  1.times do                      # the same depth as the calls above
    zs_decoy_outer
    $zs_last = true
    zs_step(1_000_000)
  end
end
Thread.pass until $zs_last && stale.status == "sleep"
puts "ready"
sleep
