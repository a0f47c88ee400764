# frozen_string_literal: true

require_relative "sdb_test_helper"

class TestRegistryHeader < Minitest::Test
  include SdbTestHelper

  def test_header_describes_this_process_and_this_ruby
    r = run_json(<<~RUBY)
      require "sdb"
      path = Sdb.registry_path
      ticks = File.read("/proc/self/stat").split(")").last.split[19].to_i
      puts JSON.dump(SdbRegistryReader.read(path).merge("path" => path, "mypid" => Process.pid,
        "ticks" => ticks, "mode" => File.stat(path).mode & 0o777, "enabled" => Sdb.enabled?,
        "desc" => RUBY_DESCRIPTION, "slots" => nil))
    RUBY
    assert_equal "SDBREG\0\0".b, r["magic"].b
    assert_equal 5, r["version"]
    assert_equal 192, r["slot_size"]
    assert_equal 1024, r["slot_count"]
    assert_equal 0, r["slots_offset"] % 64
    assert_operator r["slots_offset"], :>=, r["header_size"]
    assert_equal 0, r["spans_offset"] % 64
    assert_operator r["spans_offset"], :>=, r["slots_offset"] + 1024 * 192
    assert_equal 4096, r["span_count"]
    assert_equal r["spans_offset"] + 4096 * 128, r["strings_offset"]
    assert_equal r["strings_offset"] + 65_536, r["file_size"]
    assert_equal "/dev/shm/sdb-#{r['mypid']}", r["path"]
    assert_equal r["mypid"], r["pid"]
    assert_equal r["ticks"], r["proc_start_ticks"]
    assert_operator r["created_mono_ns"], :>, 0
    assert_equal "ENABLED", r["status_name"]
    assert_equal true, r["enabled"]
    assert_equal 0o600, r["mode"]
    assert_equal RUBY_VERSION, r["ruby_version"]
    assert_equal r["desc"], r["ruby_description"]
    assert_equal RUBY_VERSION[/\A\d+\.\d+/], r["layout_name"]
    assert_equal "", r["disabled_reason"]
  end

  # Ruby 3.1: the gem proves objspace->flags by disabling and enabling GC once at require (the
  # sidecar's GC frame there); the app's own setting must come out as it went in
  def test_require_leaves_the_apps_gc_setting_as_it_was
    r = run_json(<<~RUBY)
      before = GC.disable        # false: GC was enabled; now disabled, before the gem loads
      require "sdb"
      still_disabled = GC.enable # true if GC was still disabled
      again = GC.enable          # false: enabled now
      puts JSON.dump("before" => before, "still_disabled" => still_disabled, "again" => again,
                     "enabled" => Sdb.enabled?)
    RUBY
    assert_equal({ "before" => false, "still_disabled" => true, "again" => false, "enabled" => true }, r)
    r = run_json(<<~RUBY)
      require "sdb"
      puts JSON.dump("was_disabled" => GC.enable)
    RUBY
    assert_equal({ "was_disabled" => false }, r)
  end

  def test_max_threads_env_sets_the_slot_count
    r = run_json(<<~RUBY, "SDB_MAX_THREADS" => "16")
      require "sdb"
      h = SdbRegistryReader.read(Sdb.registry_path)
      puts JSON.dump("count" => h["slot_count"], "size" => h["file_size"], "offset" => h["slots_offset"],
                     "spans" => h["spans_offset"])
    RUBY
    assert_equal 16, r["count"]
    assert_equal (r["offset"] + 16 * 192 + 63) & ~63, r["spans"]
    assert_equal r["spans"] + 4096 * 128 + 65_536, r["size"]
  end

  def test_main_thread_gets_an_adopted_main_slot_with_its_tid
    r = run_json(<<~RUBY)
      require "sdb"
      puts JSON.dump("slots" => SdbRegistryReader.live_slots(Sdb.registry_path),
                     "tid" => Thread.main.native_thread_id)
    RUBY
    assert_equal 1, r["slots"].size
    main = r["slots"].first
    assert_equal r["tid"], main["native_tid"]
    assert_equal 0x1 | 0x2, main["flags"]
    assert_equal 1, main["serial"]
    assert_equal "", main["name"]
    assert_operator main["thread_addr"], :>, 0
    assert_equal main["thread_addr"] + 40, main["ec_addr"] if RUBY_VERSION.start_with?("3.1")
    assert_equal 0, main["gen"] % 2
  end

  def test_threads_alive_at_require_are_adopted_with_their_names
    r = run_json(<<~RUBY)
      q = Queue.new
      t = Thread.new { q.pop }
      t.name = "early"
      sleep 0.05
      require "sdb"
      slots = SdbRegistryReader.live_slots(Sdb.registry_path)
      tid = t.native_thread_id
      q << 1
      t.join
      Thread.new { }.join # any register/release call sweeps adopted threads
      after = SdbRegistryReader.live_slots(Sdb.registry_path)
      puts JSON.dump("slots" => slots, "after" => after, "tid" => tid)
    RUBY
    early = r["slots"].find { |s| s["name"] == "early" }
    refute_nil early
    assert_equal 0x2, early["flags"]
    assert_equal r["tid"], early["native_tid"]
    assert_equal 1, r["after"].size, "the adopted thread's slot is swept after it ends"
  end
end
