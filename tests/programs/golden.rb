# Golden snapshot target: threads parked at known places, and a zoo of Ruby constructs.
#
#   ruby golden.rb OUT_JSON      (SDB_GOLDEN_DIR: where the test built tests/support/golden)
#
# Once every thread is parked (or spinning), writes OUT_JSON: for each thread name, Ruby's own
# view of its frames (SdbGolden.frames: rb_profile_frames + rb_profile_frame_full_label) and its
# Thread#backtrace_locations; then prints "ready {json}" and sleeps until killed.
$LOAD_PATH.unshift(ENV.fetch("SDB_GOLDEN_DIR"))
require "json"
require "sdb"
require "sdb_golden"
$stdout.sync = true
Thread.current.name = "golden_main"
$golden_started = Queue.new

# ------------------------------------------------------------------ the zoo
module Zoo
  module Shout
    refine String do
      def zoo_shout(&blk) = $anon.new.anon_run(&blk)                # a refinement
    end
  end
end
using Zoo::Shout

module Zoo
  module Greeter                                                     # a module's method
    def greet(&blk) = Box.build(&blk)
  end

  class Box
    def self.build(&blk) = new.dm_call(&blk)                         # a singleton method
    define_method(:dm_call) { |&blk| ghost(&blk) }                   # define_method

    def method_missing(name, *args, &blk)                            # method_missing
      return super unless name == :ghost
      instance_eval { evaluated(&blk) }                              # instance_eval with a block
    end

    def respond_to_missing?(name, priv = false) = name == :ghost || super

    def evaluated(&blk)
      eval("via_eval(&blk)")                                         # eval of a string
    end

    def via_eval(&blk)
      l = lambda { pr = proc { "x".zoo_shout(&blk) }; pr.call }      # a lambda, a proc
      l.call
    end
  end

  Pair = Struct.new(:a, :b) do                                       # Struct
    def pair_run(&blk)
      [1].each { [2].each { [3].each { SOLO.solo(&blk) } } }         # blocks nested three deep
    end
  end

  SOLO = Object.new
  def SOLO.solo(&blk) = blk.call                                     # singleton of a plain object
end

$anon = Class.new do                                                 # an anonymous class
  def anon_run(&blk) = Zoo::Pair.new(1, 2).pair_run(&blk)
end

class ZooCaller
  include Zoo::Greeter
end

# ------------------------------------------------------------------ parked threads
def park_sleep
  SdbGolden.arm(:sleep); $golden_started << :sleep; sleep
end

def park_queue(q)
  SdbGolden.arm(:pop); $golden_started << :queue; q.pop
end

def park_mutex(m)
  SdbGolden.arm(:lock); $golden_started << :mutex; m.lock
end

def park_select(r)
  SdbGolden.arm(:select); $golden_started << :select; IO.select([r])
end

# a method whose frame holds special variables ($~ and $_): Ruby keeps its method entry inside an
# imemo_svar in the frame's method-entry slot
def park_svar
  "golden" =~ /old/
  $_ = "golden line"
  [1].each do
    "x".sub(/x/, "y")
    SdbGolden.arm(:sleep); $golden_started << :svar; sleep
  end
end

def busy_step(x) = (x * 31 + 7) & 0xffff

def busy_spin
  SdbGolden.arm(:itself); itself                       # Ruby 3.1: Ruby's view of this frame, here
  $golden_started << :busy
  x = 0
  x = busy_step(x) while true
end

def busy_outer = busy_spin

def recurse(n) = n.zero? ? busy_spin : recurse(n - 1)

QUEUE = Queue.new
LOCK = Mutex.new
LOCK.lock
READER, WRITER = IO.pipe

threads = {
  "sleep" => Thread.new { park_sleep },
  "queue" => Thread.new { park_queue(QUEUE) },
  "mutex" => Thread.new { park_mutex(LOCK) },
  "select" => Thread.new { park_select(READER) },
  "busy" => Thread.new { busy_outer },
  "recursion" => Thread.new { recurse(120) },
  "zoo" => Thread.new { ZooCaller.new.greet { SdbGolden.arm(:sleep); $golden_started << :zoo; sleep } },
  "required" => Thread.new { require_relative "golden_required" },
  "svar" => Thread.new { park_svar },
}
threads.each { |name, th| th.name = name }
threads.size.times { $golden_started.pop }
parked = %w[sleep queue mutex select zoo required svar]
sleep 0.01 until parked.all? { |n| threads[n].status == "sleep" }
sleep 0.05 # Ruby 3.1: each parked thread's c_call hook ran before it blocked

out = threads.to_h do |name, th|
  locs = th.backtrace_locations.map do |l|
    { "label" => l.label, "base_label" => l.base_label, "path" => l.path, "line" => l.lineno }
  end
  golden = SdbGolden.frames(th)&.map { |label, path, line| { "label" => label, "path" => path, "line" => line } }
  [name, { "golden" => golden, "backtrace" => locs }]
end
File.write(ARGV.fetch(0), JSON.generate(out))
puts "ready " + JSON.generate({ "pid" => Process.pid, "direct" => SdbGolden.direct?, "sdb_enabled" => Sdb.enabled? })
sleep
