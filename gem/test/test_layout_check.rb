# frozen_string_literal: true

require_relative "sdb_test_helper"

class TestLayoutCheck < Minitest::Test
  include SdbTestHelper

  # "patched": whether any of the methods sdb takes over (Thread#name=, Process._fork, exec) is no
  # longer Ruby's own definition; "ancestors": Thread's, Kernel's and Process's (nothing prepended)
  PROBE = <<~RUBY
    owned = -> { [Thread.instance_method(:name=), Process.method(:_fork).unbind, Kernel.instance_method(:exec),
                  Kernel.method(:exec).unbind, Process.method(:exec).unbind] }
    ancestors = -> { [Thread.ancestors, Kernel.ancestors, Process.singleton_class.ancestors].inspect }
    before, before_ancestors = owned.call, ancestors.call
    require "sdb"
    h = Sdb.registry_path && SdbRegistryReader.read(Sdb.registry_path)
    t = Thread.new { 7 }
    puts JSON.dump("enabled" => Sdb.enabled?, "status" => h && h["status_name"],
                   "reason" => h && h["disabled_reason"], "layout" => h && h["layout_name"],
                   "live" => h && h["slots"].count { |s| s["live"] == 1 },
                   "patched" => owned.call != before, "ancestors_kept" => ancestors.call == before_ancestors,
                   "value" => t.value)
  RUBY

  def test_forced_unknown_layout_warns_once_and_is_disabled_with_the_file_kept
    out, err, status = run_ruby(PROBE, "SDB_FORCE_LAYOUT" => "9.9")
    assert status.success?, err
    assert_equal ["sdb: SDB_FORCE_LAYOUT=9.9 names no layout row (known: 3.1 3.2 3.3 3.4 4.0 4.1); profiling disabled"],
                 err.lines.map(&:chomp)
    r = JSON.parse(out)
    assert_equal false, r["enabled"]
    assert_equal "DISABLED", r["status"]
    assert_match(/SDB_FORCE_LAYOUT=9.9/, r["reason"])
    assert_equal 0, r["live"]
    assert_equal false, r["patched"]
    assert_equal 7, r["value"]
  end

  def test_forced_layout_row_of_this_ruby_is_checked_and_used
    r = run_json(PROBE, "SDB_FORCE_LAYOUT" => RUBY_VERSION[/\A\d+\.\d+/])
    assert r["enabled"]
    assert_equal RUBY_VERSION[/\A\d+\.\d+/], r["layout"]
    assert_equal true, r["patched"], "enabled: Thread#name=, Process._fork and exec are sdb's C functions"
    assert_equal true, r["ancestors_kept"], "nothing is prepended"
  end

  def test_forced_layout_of_another_ruby_is_refused_cleanly
    other = RUBY_VERSION.start_with?("3.1") ? "3.4" : "3.1"
    out, err, status = run_ruby(PROBE, "SDB_FORCE_LAYOUT" => other)
    assert status.success?, err
    assert_equal 1, err.lines.size, err
    assert_match(/\Asdb: layout #{Regexp.escape(other)} does not match this Ruby/, err)
    assert_equal "DISABLED", JSON.parse(out)["status"]
  end

  # offsets, and Ruby's numbers: the type tags and st_table (this Ruby's headers say), the imemo type
  # and the frame magics and env flags (this thread's own frames say)
  %w[thread_ec cfp_iseq body_pathobj body_first_lineno cfp_size t_string st_entries imemo_iseq
     frame_magic_cfunc frame_magic_dummy frame_magic_method env_flag_local frame_flag_finish].each do |field|
    define_method("test_layout_with_a_wrong_#{field}_is_refused_without_crashing") do
      out, err, status = run_ruby(PROBE, "SDB_TEST_CORRUPT_LAYOUT" => field)
      assert status.success?, "child crashed or failed: #{status.inspect}\n#{err}"
      assert_equal 1, err.lines.size, err
      assert_match(/\Asdb: layout \d+\.\d+ does not match this Ruby .*; profiling disabled/, err)
      r = JSON.parse(out)
      assert_equal false, r["enabled"]
      assert_equal "DISABLED", r["status"]
      assert_equal err.chomp.delete_prefix("sdb: ")[0, 199], r["reason"]
      assert_equal false, r["patched"]
      assert_equal 7, r["value"]
    end
  end

  LINK_PROBE = <<~RUBY
    require "sdb"
    puts JSON.dump("enabled" => Sdb.enabled?, "link" => SdbRegistryReader.read(Sdb.registry_path)["link_fields"])
  RUBY

  def test_the_caller_callee_link_fields_are_published_when_they_hold_on_the_requiring_stack
    r = run_json(LINK_PROBE)
    assert r["enabled"]
    assert_equal 8, r["link"][0], "cfp_sp"
    refute_equal 0xffff, r["link"][1], "local_table_size: this Ruby's row has it"
  end

  def test_the_link_check_reads_the_gems_own_frames_and_finds_the_link
    out, err, status = run_ruby(LINK_PROBE, "SDB_DEBUG_LAYOUT" => "1")
    assert status.success?, err
    assert_match(%r{^sdb: caller/callee links: [1-9]\d* checked, 0 failed}, err)
    assert_equal 8, JSON.parse(out)["link"][0]
  end

  def test_a_wrong_local_table_size_is_withdrawn_and_profiling_goes_on
    out, err, status = run_ruby(LINK_PROBE, "SDB_TEST_CORRUPT_LAYOUT" => "body_local_table_size")
    assert status.success?, err
    assert_equal "", err
    r = JSON.parse(out)
    assert r["enabled"]
    assert_equal [0xffff, 0xffff], r["link"], "both link fields withdrawn (SDB_NA): the sidecar checks no link"
  end

  def test_stale_symlink_at_our_path_is_replaced_never_followed
    out, err, status = run_ruby(<<~RUBY)
      File.symlink("/tmp/sdb-symlink-target-\#{Process.pid}", "/dev/shm/sdb-\#{Process.pid}")
      require "sdb"
      p Sdb.enabled?, File.symlink?(Sdb.registry_path), File.exist?("/tmp/sdb-symlink-target-\#{Process.pid}")
    RUBY
    assert status.success?, err
    assert_equal "true\nfalse\nfalse\n", out
  end
end
