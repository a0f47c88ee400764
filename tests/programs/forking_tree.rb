# A parent that forks children on command (as puma's master forks workers, and re-forks one that
# died): tests/integration/test_process_tree.py. Commands on stdin, one per line:
#   fork NAME   fork a child: it sets its title to "tree child NAME", prints "child NAME PID T0" (T0: its
#               CLOCK_MONOTONIC in ns, after the gem's fork hook published its registry), then waits
#   go NAME     the child defines `work_in_NAME` (an ISeq born in the child alone) and runs it until
#               killed, after printing "working NAME"
#   kill NAME   the parent SIGKILLs the child and reaps it, then prints "killed NAME T" (T: after the reap)
#   quit        the parent kills what is left and exits
# The parent's main thread waits on stdin in `parent_waits` between commands. Run without `-rsdb`
# (record adds it), it loads the gem itself.
require "sdb"
$stdout.sync = true

def mono_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

def child(name, go, parent)
  $0 = "tree child #{name}"
  puts "child #{name} #{Process.pid} #{mono_ns}"
  go.gets
  # defined only now, in this child: another child's method of the same shape may take its address
  eval("def work_in_#{name}(n) = (1..n).sum { |i| i * i }")
  puts "working #{name}"
  send(:"work_in_#{name}", 2_000) while Process.ppid == parent     # ends with its parent
end

def parent_waits = $stdin.gets

kids = {}
puts "ready #{Process.pid}"
while (line = parent_waits)
  cmd, name = line.split
  case cmd
  when "fork"
    r, w = IO.pipe
    pid = fork do
      w.close
      child(name, r, Process.ppid)
    end
    r.close
    kids[name] = [pid, w]
  when "go"
    kids[name][1].puts("go")
  when "kill"
    Process.kill(:KILL, kids[name][0])
    Process.wait(kids[name][0])
    kids.delete(name)
    puts "killed #{name} #{mono_ns}"
  when "quit"
    break
  end
end
kids.each_value do |pid, _|
  Process.kill(:KILL, pid)
  Process.wait(pid)
end
puts "done"
