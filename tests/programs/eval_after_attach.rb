# Defines methods after the sidecar attached, by eval and by loading a file through a symlink (its
# path and realpath differ, so Ruby keeps its pathobj as [path, realpath]); then runs them.
# stdin "go DIR\n": create the file under DIR, define, run; prints "ran {json}" with Ruby's own view,
# then runs sdb_loaded_method again and again until killed (a recording that goes on past "ran" keeps
# sampling it, however late a loaded machine lets the sampler run).
require "sdb"
require "json"
$stdout.sync = true

require_relative "spin"

puts "ready #{Process.pid}"
dir = $stdin.gets.split(" ", 2)[1].strip
real = File.join(dir, "real_" + "d" * 150)
Dir.mkdir(real)
File.write(File.join(real, "loaded_after_attach.rb"), <<~RUBY)
  def sdb_loaded_method
    spin(0.3)
  end
RUBY
link = File.join(dir, "link_" + "l" * 150)
File.symlink(real, link)
require File.join(link, "loaded_after_attach.rb")

EVAL_PATH = "/sdb/evaluated/" + "p" * 200 + ".rb"
names = (1..20).map { |i| "sdb_evaluated_#{i}_" + "x" * 130 }
names.each_with_index do |name, i|
  eval("def #{name}\n  spin(0.02)\nend\n", TOPLEVEL_BINDING, EVAL_PATH, 100 + 10 * i)
end
sleep 0.3 # the events reach the sidecar before the methods run
names.each { |n| send(n) }
sdb_loaded_method
iseq = RubyVM::InstructionSequence.of(method(:sdb_loaded_method))
first = RubyVM::InstructionSequence.of(method(names[0]))
puts "ran " + JSON.generate({ "names" => names, "eval_path" => EVAL_PATH,
                              "loaded" => { "path" => iseq.path, "absolute_path" => iseq.absolute_path,
                                            "first_line" => iseq.first_lineno },
                              "eval_first_line" => first.first_lineno })
loop { sdb_loaded_method }
