# A program that never mentions sdb: `sdb-sidecar record -- ruby record_me.rb` loads the gem into it.
#
#   ruby record_me.rb            works until a line arrives on stdin: a number (it exits with that
#                                status) or a signal name such as TERM (it dies of that signal)
#   ruby record_me.rb forever    works until interrupted (Ctrl-C)
#
# Prints "hello sdb=<Sdb.enabled?>" first (false when the gem is not loaded), "ready" once working,
# and "bye" from an ensure on the way out.
$stdout.sync = true
puts "hello sdb=#{defined?(Sdb) ? Sdb.enabled? : false}"

def crunch_numbers(x)
  i = 0
  while i < 2000
    x = (x * 31 + i) % 1_000_003
    i += 1
  end
  x
end

def record_me_work
  x = 1
  x = crunch_numbers(x) until $status
  x
end

$status = nil
Thread.new { $status = ($stdin.gets || "0").strip } unless ARGV[0] == "forever"
begin
  puts "ready"
  record_me_work
ensure
  puts "bye"
end
if $status.match?(/\A\d+\z/)
  exit Integer($status)
else
  Process.kill($status, Process.pid)
  sleep 5
end
