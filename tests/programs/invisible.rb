# What an app, its error tracker and its profilers can observe of threads, fork, exec and at_exit:
# printed so that two runs can be compared byte for byte (tests/integration/test_gem_invisible.py
# runs it without sdb, with `-rsdb`, and with `require "sdb"` in the middle; the three outputs
# must be equal). Object addresses are masked; pids and native thread ids are never printed.
#
#   ruby [-rsdb] invisible.rb       SDB_GOLDEN_DIR: tests/support/golden built for this Ruby
#                                   INVISIBLE_LATE_REQUIRE=1: require "sdb" after a thread and an
#                                   at_exit handler exist
$stdout.sync = true
$LOAD_PATH.unshift(ENV.fetch("SDB_GOLDEN_DIR"))
require "sdb_golden"
require "stringio"

def show(what, value) = puts("#{what}: #{value.to_s.gsub(/0x\h+/, "0x_")}")

def locs(list) = list.map { |l| "#{File.basename(l.path.to_s)}:#{l.lineno}:#{l.label}|#{l.base_label}" }

at_exit { puts "at_exit 1 (registered first)" }
EARLY = Thread.new { Thread.stop; raise ArgumentError, "early thread" }
Thread.pass until EARLY.status == "sleep"
require "sdb" if ENV["INVISIBLE_LATE_REQUIRE"] == "1"
at_exit { puts "at_exit 2" }

# ------------------------------------------------------------------ threads made every way
class Worker < Thread
  def initialize(x)
    super(x) { |y| raise KeyError, "worker #{y}" }
  end
end

def failing(kind) = raise(RuntimeError, "boom in #{kind}")

makers = {
  "Thread.new" => -> { Thread.new(1, k: 2) { |a, k:| failing("new #{a} #{k}") } },
  "Thread.start" => -> { Thread.start { failing("start") } },
  "Thread.fork" => -> { Thread.fork { failing("fork") } },
  "Worker.new" => -> { Worker.new(7) },
}
captured = StringIO.new
real_stderr, $stderr = $stderr, captured
ALL = [EARLY]
makers.each do |how, make|
  t = make.call
  ALL << t
  show "#{how} inspect at start", t.inspect.sub(/ (run|sleep|dead)>\z/, ">")
  begin
    t.join
  rescue Exception => e
    show "#{how} error", e.inspect
    show "#{how} backtrace", e.backtrace.inspect
    show "#{how} backtrace_locations", locs(e.backtrace_locations).inspect
    show "#{how} full_message", e.full_message(highlight: false).inspect
  end
  show "#{how} inspect at end", t.inspect
end
EARLY.wakeup
begin
  EARLY.join
rescue ArgumentError => e
  show "early thread backtrace", e.backtrace.inspect
  show "early thread full_message", e.full_message(highlight: false).inspect
end
$stderr = real_stderr
show "report_on_exception output", captured.string.inspect

# ------------------------------------------------------------------ names, errors of core methods
named = Thread.new { Thread.stop }
ALL << named
Thread.pass until named.status == "sleep"
named.name = "worker-1"
show "named inspect", named.inspect
show "name", named.name.inspect
[-> { named.name = 5 }, -> { Thread.new }, -> { Thread.start }, -> { exec("/nonexistent/invisible-binary") },
 -> { Process.exec("/nonexistent/invisible-binary") }, -> { Kernel.exec("/nonexistent/invisible-binary") }].each do |l|
  l.call
rescue Exception => e
  show "error", e.inspect
  show "error backtrace", e.backtrace.inspect
end
named.wakeup.join

# ------------------------------------------------------------------ where a thread is, as it sees it
def park_in_stack(q)
  loop do
    3.times do |i|
      next unless i == 2

      eval("SdbGolden.arm(:sleep); q << caller_locations; sleep")
    end
  end
end

q = Queue.new
parked = Thread.new { park_in_stack(q) }
ALL << parked
show "caller_locations in the thread", locs(q.pop).inspect
Thread.pass until parked.status == "sleep"
sleep 0.05 # Ruby 3.1: the c_call hook ran before the thread blocked
show "parked backtrace", parked.backtrace.inspect
show "parked backtrace_locations", locs(parked.backtrace_locations).inspect
show "Ruby's profiling API (rb_profile_frames + rb_profile_frame_full_label)",
     SdbGolden.frames(parked).map { |label, path, line| "#{label}@#{File.basename(path.to_s)}:#{line}" }.inspect
show "caller_locations at top", locs(caller_locations(0)).inspect

# ------------------------------------------------------------------ the process's threads
show "Thread.list", Thread.list.map(&:inspect).inspect
# Thread objects that never started (the Thread.new and Thread.start without a block above) are
# garbage whose collection depends on when the GC runs: left out of the counts, not made to vanish
started = -> { ObjectSpace.each_object(Thread).reject { |t| t.alive? && !Thread.list.include?(t) } }
show "ObjectSpace threads", started.call.count
show "ObjectSpace live threads", started.call.count(&:alive?)
parked.kill.join
show "ObjectSpace live threads after kill", started.call.count(&:alive?)
show "ObjectSpace TracePoints", ObjectSpace.each_object(TracePoint).count

# ------------------------------------------------------------------ the core methods, as reflection shows them
show "ancestors", [Thread.ancestors, Kernel.ancestors, Process.singleton_class.ancestors,
                   Thread.singleton_class.ancestors].inspect
[Thread.instance_method(:name=), Thread.method(:new), Thread.method(:start), Thread.method(:fork),
 Process.method(:_fork), Process.method(:fork), Kernel.instance_method(:fork), Kernel.instance_method(:exec),
 Kernel.method(:exec), Process.method(:exec), Kernel.instance_method(:sleep)].each do |m|
  show "method", [m.inspect, m.owner, m.arity, m.parameters, m.source_location].inspect
end

# ------------------------------------------------------------------ fork, then exec
r, w = IO.pipe
pid = fork do
  r.close
  w.puts "child sees #{Thread.list.size} thread(s)"
  at_exit { w.puts "child at_exit" }
  exec(RbConfig.ruby, "-e", "$stdout.puts 'exec ok'", out: w)
end
w.close
Process.wait(pid)
show "fork child", r.read.inspect
show "fork child status", $?.exitstatus
pid = fork { exit!(3) }
Process.wait(pid)
show "exit! child status", $?.exitstatus
show "IO.popen('-')", IO.popen("-") { |io| io ? io.read : (print("popen child"); exit!(0)) }.inspect

# ------------------------------------------------------------------ a Ractor that makes a thread
if defined?(Ractor)
  verbose, $VERBOSE = $VERBOSE, nil # "Ractor is experimental"
  ractor = Ractor.new { Thread.new { Thread.current.inspect.sub(/0x\h+/, "0x_") }.value }
  $VERBOSE = verbose
  show "ractor's thread", (ractor.respond_to?(:value) ? ractor.value : ractor.take)
end
puts "end of main"
# for the test only, never printed: was sdb loaded and enabled in this run?
if (state = ENV["INVISIBLE_SDB_STATE"])
  File.write(state, defined?(Sdb) ? "enabled=#{Sdb.enabled?}" : "not loaded")
end
