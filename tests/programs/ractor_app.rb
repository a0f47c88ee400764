# A Ractor app: threads of the main Ractor parked at known places in named, labelled work (methods
# of classes and modules, blocks, a core class reopened, a unit of work of Sdb.label) while three
# non-main Ractors compute. With RUBY_BOX=1 (Ruby 4.0+) the shop's classes are loaded into a
# Ruby::Box of their own and core classes are reopened in the main box: class data per box.
#
#   ruby ractor_app.rb OUT_JSON      (SDB_GOLDEN_DIR: where the test built tests/support/golden)
#
# Once every thread is parked, writes OUT_JSON: for each thread name, Ruby's own view of its frames
# (SdbGolden.frames) and its Thread#backtrace_locations; then prints "ready {json}" and sleeps.
$LOAD_PATH.unshift(ENV.fetch("SDB_GOLDEN_DIR"))
require "json"
require "sdb"
require "sdb_golden"
$stdout.sync = true
Warning[:experimental] = false # "Ractor is experimental"
Thread.current.name = "ractor_main"
BOXED = defined?(Ruby::Box) && Ruby::Box.enabled?

if BOXED
  SHOP_BOX = Ruby::Box.new
  SHOP_BOX.require(File.join(__dir__, "ractor_app_shop.rb"))
  Shop = SHOP_BOX::Shop
else
  require_relative "ractor_app_shop"
end

# ------------------------------------------------------------------ the non-main Ractors: compute
# Each names its thread and labels its steps, as an app's Ractor workers may (the gem must neither
# raise there nor publish anything from there), and says how its first step went: through a
# Ractor::Port from Ruby 4.0 (Ractor.yield is gone), Ractor.yield before.
class Cruncher
  def initialize(k)
    @k = k
  end

  def spin(port)
    said = begin
      Thread.current.name = "cruncher #{@k}"
      Sdb.label(endpoint: "crunch") { step(1_000) }
      "ok"
    rescue Exception => e # rubocop:disable Lint/RescueException
      e.class.name
    end
    port ? port << said : Ractor.yield(said)
    loop do
      Sdb.label(endpoint: "crunch") { step(20_000) }
      sleep 0.002
    end
  end

  # allocates nothing: no GC of theirs can leave a name of the main Ractor's unreadable mid-sweep
  def step(n)
    x = @k
    i = 0
    while i < n
      x = (x * 31 + 7) & 0xffff
      i += 1
    end
    x
  end
end

PORT = defined?(Ractor::Port) ? Ractor::Port.new : nil
RACTORS = Array.new(3) { |k| Ractor.new(k, PORT) { |x, port| Cruncher.new(x).spin(port) } }
RACTOR_STEPS = RACTORS.map { |r| PORT ? PORT.receive : r.take }

# ------------------------------------------------------------------ the main Ractor's threads
$started = Queue.new

def park(name)
  SdbGolden.arm(:sleep); $started << name; sleep
end

module Tally                                                         # a module reopening a core class
  refine Array do
    def tally_each(&blk) = each(&blk)
  end
end
using Tally

class Integer                                                        # reopened in the main box
  def park_here(name) = [self].tally_each { park(name) }
end

class Report
  def self.build(name) = new.render(name)
  def render(name) = Sdb.label(endpoint: "report") { 2.times { |i| return 7.park_here(name) if i == 1 } }
end

threads = {
  "shop" => Thread.new { Shop::Cart.new([1]).checkout { park(:shop) } },
  "boxed_core" => Thread.new { Shop.cents(3) { park(:boxed_core) } },
  "report" => Thread.new { Report.build(:report) },
}
threads.each { |name, th| th.name = name }
threads.size.times { $started.pop }
sleep 0.01 until threads.values.all? { |th| th.status == "sleep" }
sleep 0.05 # Ruby 3.1: each parked thread's c_call hook ran before it blocked

out = threads.to_h do |name, th|
  locs = th.backtrace_locations.map do |l|
    { "label" => l.label, "base_label" => l.base_label, "path" => l.path, "line" => l.lineno }
  end
  golden = SdbGolden.frames(th)&.map { |label, path, line| { "label" => label, "path" => path, "line" => line } }
  [name, { "golden" => golden, "backtrace" => locs }]
end
File.write(ARGV.fetch(0), JSON.generate(out))
# syswrite: under RUBY_BOX=1 Ruby 4.0.5 can leave a line put to a pipe in its buffer, $stdout.sync or not
STDOUT.syswrite "ready " + JSON.generate({ "pid" => Process.pid, "boxed" => BOXED ? true : false, "sdb_enabled" => Sdb.enabled?,
                                     "ractor_steps" => RACTOR_STEPS }) + "\n"
sleep
