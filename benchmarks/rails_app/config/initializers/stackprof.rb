# stackprof, started the way its users start a whole-process profile: StackProf.start at boot, raw
# samples off, 1 ms interval, results saved when the server exits (STACKPROF_OUT, else tmp/).
# (StackProf::Middleware starts and stops the profiler around each request instead; with 5 puma
# threads the first request to finish stops it for the others, so it would profile less than this.)
if APP_PROFILER.start_with?("stackprof")
  require "stackprof"
  mode = APP_PROFILER == "stackprof-wall" ? :wall : :cpu
  StackProf.start(mode: mode, interval: 1000, raw: false)
  at_exit do
    StackProf.stop
    out = ENV["STACKPROF_OUT"] || Rails.root.join("tmp", "stackprof-#{mode}-#{Process.pid}.dump").to_s
    FileUtils.mkdir_p(File.dirname(out))
    StackProf.results(out)
  end
end
