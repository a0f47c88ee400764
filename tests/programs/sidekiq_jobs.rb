# Two Sidekiq job classes for tests/integration/test_requests_sidekiq.py: one CPU-bound, one that
# sleeps. Each job appends its jid and class to $SDB_TEST_LOG when done (the app's own log of the
# jobs it ran). sdb is loaded before Sidekiq here (RUBYOPT=-rsdb): its server middleware comes with
# `require "sdb/sidekiq"`, as README says.
require "sidekiq"
require "sdb/sidekiq"

LOG_PATH = ENV.fetch("SDB_TEST_LOG")
LOG_LOCK = Mutex.new

def note_done(klass, jid)
  LOG_LOCK.synchronize { File.write(LOG_PATH, "#{klass} #{jid}\n", mode: "a") }
end

class CrunchNumbersJob
  include Sidekiq::Worker

  def perform(ms)
    t_end = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < t_end
    note_done(self.class.name, jid)
    x
  end
end

class WaitForPartnerJob
  include Sidekiq::Worker

  def perform(ms)
    sleep(ms / 1000.0)
    note_done(self.class.name, jid)
  end
end
