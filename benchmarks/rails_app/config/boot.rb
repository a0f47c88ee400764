# Loaded first, before Rails: where a user puts `require "sdb"` (README, "Use it on your own app").
#
# APP_PROFILER picks what the app runs with (the benchmark sets it per configuration):
#   sdb (default)   require "sdb": the gem publishes every thread's stack; sdb-sidecar records from outside
#   none            no profiler: the sdb gem is never loaded (nor stackprof)
#   stackprof-wall  stackprof started at boot, wall-clock mode, 1 ms (config/initializers/stackprof.rb)
#   stackprof-cpu   the same in CPU mode
# Gems come from Debian's packages (ruby-rails, puma, ruby-sqlite3, ruby-stackprof): no Bundler.
APP_PROFILER = ENV.fetch("APP_PROFILER", "sdb")
unless %w[sdb none stackprof-wall stackprof-cpu].include?(APP_PROFILER)
  abort "rails_app: APP_PROFILER must be sdb, none, stackprof-wall or stackprof-cpu (got #{APP_PROFILER.inspect})"
end
require "sdb" if APP_PROFILER == "sdb"
