# frozen_string_literal: true

require_relative "sdb_test_helper"

class TestThreadLifecycle < Minitest::Test
  include SdbTestHelper

  def test_threads_made_by_thread_new_start_and_fork_get_live_slots_with_their_tids_and_names
    r = run_json(<<~RUBY)
      require "sdb"
      q = Queue.new
      made = { "new" => Thread.new { q.pop }, "start" => Thread.start { q.pop }, "fork" => Thread.fork { q.pop } }
      made.each { |how, t| t.name = "via-" + how }
      sleep 0.05 until made.values.all? { |t| t.status == "sleep" }
      slots = SdbRegistryReader.live_slots(Sdb.registry_path)
      tids = made.transform_values(&:native_thread_id)
      3.times { q << 1 }
      made.each_value(&:join)
      puts JSON.dump("slots" => slots, "tids" => tids)
    RUBY
    %w[new start fork].each do |how|
      slot = r["slots"].find { |s| s["name"] == "via-#{how}" }
      refute_nil slot, "Thread.#{how} thread has a live slot"
      assert_equal r["tids"][how], slot["native_tid"]
      assert_equal 0, slot["flags"]
      assert_equal 0, slot["gen"] % 2
    end
    assert_equal 4, r["slots"].map { |s| s["serial"] }.uniq.size
  end

  # Ruby >= 3.3 reports every thread's end (the EXITED hook); Ruby 3.1 only a block that returns
  # (THREAD_END), so a thread ended by an exception or a kill is freed by the next thread start.
  def test_slots_are_freed_after_return_raise_and_kill
    r = run_json(<<~RUBY)
      require "sdb"
      Thread.report_on_exception = false
      live = -> { SdbRegistryReader.live_slots(Sdb.registry_path).size }
      Thread.new { 1 }.join
      after_return = live.call
      (Thread.new { raise "boom" }.join rescue nil)
      after_raise = live.call
      t = Thread.new { sleep }
      sleep 0.05 until t.status == "sleep"
      during = live.call
      t.kill.join
      after_kill = live.call
      Thread.new { 1 }.join
      after = SdbRegistryReader.read(Sdb.registry_path)
      puts JSON.dump("after_return" => after_return, "after_raise" => after_raise, "during" => during,
                     "after_kill" => after_kill, "live" => after["slots"].count { |s| s["live"] == 1 },
                     "serials" => after["slots"].map { |s| s["serial"] }.max)
    RUBY
    every_end = RUBY_VERSION >= "3.3"
    assert_equal 1, r["after_return"]
    assert_equal every_end ? 1 : 2, r["after_raise"]
    assert_equal 2, r["during"]
    assert_equal every_end ? 1 : 2, r["after_kill"]
    assert_equal 1, r["live"], "only the main thread is left"
    assert_equal 5, r["serials"], "serials are never reused"
  end

  def test_freed_slot_is_reused_with_a_new_serial
    r = run_json(<<~RUBY)
      require "sdb"
      Thread.new { }.join
      t = Thread.new { sleep }
      sleep 0.05 until t.status == "sleep"
      slot = SdbRegistryReader.live_slots(Sdb.registry_path).find { |s| s["flags"] == 0 }
      t.kill.join
      puts JSON.dump(slot)
    RUBY
    assert_equal 1, r["index"]
    assert_equal 3, r["serial"]
  end

  def test_name_assignment_updates_the_threads_slot
    r = run_json(<<~RUBY)
      require "sdb"
      q = Queue.new
      t = Thread.new { q.pop }
      t.name = "first"
      Thread.current.name = "the-main"
      t.name = "second-" + "x" * 100
      sleep 0.05 until t.status == "sleep"
      slots = SdbRegistryReader.live_slots(Sdb.registry_path)
      q << 1
      t.join
      puts JSON.dump(slots)
    RUBY
    names = r.map { |s| s["name"] }
    assert_includes names, "the-main"
    assert_includes names, "second-" + "x" * 56 # truncated to SDB_NAME_MAX - 1
    refute_includes names, "first"
  end

  def test_slot_exhaustion_warns_once_and_threads_still_run
    out, err, status = run_ruby(<<~RUBY, "SDB_MAX_THREADS" => "4")
      require "sdb"
      q = Queue.new
      ts = 6.times.map { |i| Thread.new { q.pop; i } }
      sleep 0.05 until ts.all? { |t| t.status == "sleep" }
      live = SdbRegistryReader.live_slots(Sdb.registry_path).size
      6.times { q << 1 }
      p ts.map(&:value), live
      t = Thread.new { sleep }
      sleep 0.05 until t.status == "sleep"
      p SdbRegistryReader.live_slots(Sdb.registry_path).size
    RUBY
    assert status.success?, err
    assert_equal 1, err.scan(/sdb: all 4 registry slots are taken/).size, err
    assert_equal "[0, 1, 2, 3, 4, 5]\n4\n2\n", out
  end

  def test_subclass_of_thread_calling_super_gets_a_slot
    r = run_json(<<~RUBY)
      require "sdb"
      class Worker < Thread
        def initialize(x)
          super(x) { |y| Thread.current.name = "worker"; sleep 0.3; y * 2 }
        end
      end
      w = Worker.new(21)
      sleep 0.1
      slots = SdbRegistryReader.live_slots(Sdb.registry_path)
      puts JSON.dump("value" => w.value, "names" => slots.map { |s| s["name"] })
    RUBY
    assert_equal 42, r["value"]
    assert_includes r["names"], "worker"
  end
end
