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
  def run_ruby(script, env = {})
    env = { "SDB_DISABLE" => nil, "SDB_FORCE_LAYOUT" => nil, "SDB_TEST_CORRUPT_LAYOUT" => nil,
            "SDB_MAX_THREADS" => nil }.merge(env)
    Open3.capture3(env, RUBY, "-I", LIB, "-I", TEST_DIR, "-rjson", "-rsdb_registry_reader", "-e", script)
  end

  # Runs `script`, which must print one JSON document last; returns it parsed.
  def run_json(script, env = {})
    out, err, status = run_ruby(script, env)
    assert status.success?, "child failed (#{status.inspect}):\n#{err}\n#{out}"
    JSON.parse(out.lines.last)
  end
end
