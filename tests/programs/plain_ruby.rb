# A Ruby program that never loads the sdb gem: prints "ready {json}" and parks.
require "json"
$stdout.sync = true
puts "ready " + JSON.generate({ "pid" => Process.pid })
sleep
