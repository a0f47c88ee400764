# Names chosen to drive a terminal: OSC (window title), SGR (colour), BEL, a line break and `;`, in a
# thread name, a method defined with define_method, and a file name given to eval. Prints
# "ready <pid>" once the thread runs in them; runs until stdin closes.
require "sdb"

EVIL = "\e]0;pwned\a\e[31mred\e[0m\a;semi\nline"

module Hostile
  define_method("spin#{EVIL}") do |seconds|
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t
    x
  end
  module_function
end

eval(<<~RUBY, binding, "evil#{EVIL}.rb", 1)
  def evil_path_loop
    loop { Object.new.extend(Hostile).send("spin#{EVIL}", 0.05) }
  end
RUBY

worker = Thread.new do
  Thread.current.name = "worker#{EVIL}"
  evil_path_loop
end
sleep 0.1 until worker.name
$stdout.puts "ready #{Process.pid}"
$stdout.flush
$stdin.gets
