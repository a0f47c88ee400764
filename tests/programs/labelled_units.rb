# Units of work named with Sdb.label: rounds of a CPU-bound unit and a sleeping one, for `seconds`
# (ARGV[0]). The app's own log of every unit (endpoint, request id, its duration as the app saw it)
# goes to ARGV[1] as JSON at the end: what the trace's spans must match.
require "json"

def burn(ms)
  t_end = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t_end
  x
end

def wait_for_io(ms) = sleep(ms / 1000.0)

seconds = Float(ARGV.fetch(0, "2"))
log = []
clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
t_end = clock.() + seconds
n = 0
while clock.() < t_end
  [["Cpu#work", -> { burn(3) }], ["Io#wait", -> { wait_for_io(10) }]].each do |endpoint, work|
    id = "#{endpoint[0..1].downcase}-#{n}"
    t0 = clock.()
    Sdb.label(endpoint: endpoint, request_id: id) { work.() }
    log << { "endpoint" => endpoint, "request_id" => id, "ms" => (clock.() - t0) * 1000 }
  end
  n += 1
end
File.write(ARGV.fetch(1), JSON.dump(log))
