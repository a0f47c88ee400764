# frozen_string_literal: true

require "minitest/autorun"
require "open3"
require "json"
require "rbconfig"

# Every scenario runs in a fresh child Ruby: `require "sdb"` is process-wide.
module SdbTestHelper
  RUBY = ENV.fetch("SDB_TEST_RUBY", RbConfig.ruby)
  LIB = File.expand_path("../lib", __dir__)
  TEST_DIR = __dir__

  # Runs `script` in a child Ruby with sdb on the load path; returns [stdout, stderr, status].
  # timeout: seconds after which the child is killed (SIGKILL): its status then says so (termsig 9).
  def run_ruby(script, env = {}, timeout = 300)
    env = { "SDB_DISABLE" => nil, "SDB_FORCE_LAYOUT" => nil, "SDB_TEST_CORRUPT_LAYOUT" => nil,
            "SDB_MAX_THREADS" => nil, "SDB_SERVICE_NAME" => nil, "OTEL_SERVICE_NAME" => nil }.merge(env)
    Open3.popen3(env, RUBY, "-I", LIB, "-I", TEST_DIR, "-rjson", "-rsdb_registry_reader", "-e", script) do |i, o, e, t|
      i.close
      out = Thread.new { o.read }
      err = Thread.new { e.read }
      unless t.join(timeout)
        Process.kill(:KILL, t.pid)
        t.join
      end
      [out.value, err.value, t.value]
    end
  end

  # Runs `script`, which must print one JSON document last; returns it parsed.
  def run_json(script, env = {})
    out, err, status = run_ruby(script, env)
    assert status.success?, "child failed (#{status.inspect}):\n#{err}\n#{out}"
    JSON.parse(out.lines.last)
  end
end
