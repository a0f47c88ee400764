# frozen_string_literal: true

require_relative "sdb_test_helper"

class TestForkAndExit < Minitest::Test
  include SdbTestHelper

  def test_fork_child_gets_its_own_registry_and_the_parents_file_is_unchanged
    r = run_json(<<~RUBY)
      require "sdb"
      q = Queue.new
      t = Thread.new { q.pop }
      sleep 0.05 until t.status == "sleep"
      # the parent's own threads keep their state words current (Ruby >= 3.2): leave those out
      without_states = lambda do |bytes|
        h = SdbRegistryReader.read(Sdb.registry_path)
        b = bytes.dup
        h["slot_count"].times { |i| b[h["slots_offset"] + i * h["slot_size"] + 56, 4] = 0.chr * 4 }
        b
      end
      before = without_states.(File.binread(Sdb.registry_path))
      rd, wr = IO.pipe
      pid = fork do
        rd.close
        h = SdbRegistryReader.read(Sdb.registry_path)
        wr.write JSON.dump("path" => Sdb.registry_path, "pid" => Process.pid, "enabled" => Sdb.enabled?,
                           "header_pid" => h["pid"], "status" => h["status_name"],
                           "live" => h["slots"].select { |s| s["live"] == 1 },
                           "tid" => Thread.current.native_thread_id)
        wr.close
      end
      wr.close
      child = JSON.parse(rd.read)
      Process.wait(pid)
      after = without_states.(File.binread(Sdb.registry_path))
      q << 1
      t.join
      puts JSON.dump("child" => child, "same" => before == after, "parent_path" => Sdb.registry_path,
                     "child_file_left" => File.exist?(child["path"]))
    RUBY
    child = r["child"]
    assert_equal "/dev/shm/sdb-#{child['pid']}", child["path"]
    refute_equal r["parent_path"], child["path"]
    assert_equal child["pid"], child["header_pid"]
    assert_equal "ENABLED", child["status"]
    assert child["enabled"]
    assert_equal 1, child["live"].size, "only the forking thread survives"
    # the forking thread is the child's only thread: its tid is the child's pid
    assert_equal child["pid"], child["live"][0]["native_tid"]
    assert_equal 0x1, child["live"][0]["flags"] & 0x1
    assert r["same"], "the parent's registry is byte-for-byte unchanged by the child"
    refute r["child_file_left"], "the child's registry is removed at the child's exit"
  end

  # A child's start time is worked out from CLOCK_BOOTTIME around the fork (no read of
  # /proc/self/stat): a sidecar trusts a registry only if it equals field 22 of /proc/<pid>/stat.
  def test_fork_children_publish_the_start_time_proc_shows_for_them
    r = run_json(<<~RUBY)
      require "sdb"
      rd, wr = IO.pipe
      pids = 40.times.map do
        fork do
          rd.close
          h = SdbRegistryReader.read(Sdb.registry_path)
          stat = File.read("/proc/self/stat").split(") ").last.split
          wr.puts JSON.dump([h["proc_start_ticks"], Integer(stat[19]), h["pid"], Process.pid])
          wr.close
          exit!(0)
        end
      end
      wr.close
      rows = rd.each_line.map { |l| JSON.parse(l) }
      pids.each { |pid| Process.wait(pid) }
      puts JSON.dump(rows)
    RUBY
    assert_equal 40, r.size
    r.each do |published, proc_ticks, header_pid, pid|
      assert_equal proc_ticks, published, "child #{pid}: start ticks in its registry"
      assert_equal pid, header_pid
    end
  end

  # What a sidecar that follows a process tree finds: the child's registry under its pid, whole,
  # before the child ran any code of its own (it blocks on a pipe). The first child gets a spare
  # the parent made; the second the first child's file, taken back once it was gone: it must be
  # as clean as new (the first child left threads, a span and an endpoint name in it).
  def test_a_fork_child_is_published_whole_at_once_even_in_a_file_taken_back_from_a_gone_child
    r = run_json(<<~RUBY)
      require "sdb"
      def published(pid)
        path = "/dev/shm/sdb-\#{pid}"
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 2
        sleep 0.001 until File.exist?(path) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        h = SdbRegistryReader.read(path)
        st = File.stat(path)
        { "pid" => h["pid"], "status" => h["status_name"], "ticks" => h["proc_start_ticks"],
          "proc_ticks" => Integer(File.read("/proc/\#{pid}/stat").split(") ").last.split[19]),
          "live" => h["slots"].select { |s| s["live"] == 1 }.map { |s| [s["native_tid"], s["flags"], s["serial"]] },
          "span_head" => h["span_head"], "strings_used" => h["strings_used"], "layout" => h["layout_name"],
          "mode" => st.mode & 0o777, "file" => st.file?, "ino" => st.ino }
      end
      go_r, go_w = IO.pipe
      first = fork do
        go_w.close
        go_r.read # until the parent has looked; then it fills its registry and ends without cleaning up
        3.times { Thread.new { sleep } }
        sleep 0.01 until SdbRegistryReader.live_slots(Sdb.registry_path).size == 4
        Sdb.label(endpoint: "FirstChildJob", request_id: "abc") { }
        exit!(0)
      end
      first_seen = published(first)
      go_w.close
      Process.wait(first)
      hold_r, hold_w = IO.pipe
      second = fork { hold_w.close; hold_r.read; exit!(0) }
      second_seen = published(second)
      hold_w.close
      Process.wait(second)
      puts JSON.dump("first" => [first, first_seen], "second" => [second, second_seen],
                     "parent_layout" => SdbRegistryReader.read(Sdb.registry_path)["layout_name"])
    RUBY
    [r["first"], r["second"]].each do |pid, seen|
      assert_equal pid, seen["pid"]
      assert_equal "ENABLED", seen["status"]
      assert_equal seen["proc_ticks"], seen["ticks"], "start ticks a sidecar checks"
      assert_equal [[pid, 0x3, 1]], seen["live"], "only the forking thread, as the main thread, serial 1"
      assert_equal 0, seen["span_head"]
      assert_equal 0, seen["strings_used"]
      assert_equal r["parent_layout"], seen["layout"]
      assert_equal 0o600, seen["mode"]
      assert seen["file"]
    end
    assert_equal r["first"][1]["ino"], r["second"][1]["ino"], "the second child got the first one's file back, emptied"
  end

  def test_io_popen_dash_child_gets_its_own_registry
    out, err, status = run_ruby(<<~RUBY)
      require "sdb"
      io = IO.popen("-")
      if io
        child_path = io.read.strip
        io.close
        puts [child_path != Sdb.registry_path, File.exist?(Sdb.registry_path)].inspect
      else
        puts Sdb.registry_path
      end
    RUBY
    assert status.success?, err
    assert_equal "[true, true]\n", out
  end

  def test_registry_file_is_removed_at_exit
    out, err, status = run_ruby(<<~RUBY)
      require "sdb"
      puts Sdb.registry_path
      $stdout.flush
      puts File.exist?(Sdb.registry_path)
    RUBY
    assert status.success?, err
    path, existed = out.lines.map(&:strip)
    assert_equal "true", existed
    refute File.exist?(path), "#{path} is gone after exit"
  end

  # Fork-per-job servers end their children with exit!, which runs no at_exit: the parent removes
  # the registries of its children once they are gone (reaped), at its next fork and at its exit.
  def test_registries_of_children_ended_by_exit_bang_are_removed_by_the_parent
    out, err, status = run_ruby(<<~RUBY)
      require "sdb"
      def child_path(pid_and_pipe)
        pid, r = pid_and_pipe
        path = r.gets.strip
        [pid, path]
      end
      def start_child(hold = nil)
        r, w = IO.pipe
        pid = fork { r.close; w.puts(Sdb.registry_path); w.close; hold&.last&.close; hold&.first&.read; exit!(0) }
        w.close
        child_path([pid, r])
      end
      paths = 3.times.map { pid, path = start_child; Process.wait(pid); path }
      puts paths.map { |p| File.exist?(p) }.inspect        # each gone before the next fork: removed
      hold_r, hold_w = IO.pipe
      alive_pid, alive_path = start_child([hold_r, hold_w])
      short_pid, short_path = start_child
      Process.wait(short_pid)
      zombie_pid, zombie_path = start_child
      sleep 0.01 until File.read("/proc/\#{zombie_pid}/stat").split(") ").last.start_with?("Z")
      pid, = start_child
      Process.wait(pid)
      # a child alive, and a child ended but not reaped yet, keep theirs
      puts [File.exist?(paths[2]), File.exist?(alive_path), File.exist?(zombie_path)].inspect
      hold_w.close
      Process.wait(alive_pid)
      Process.wait(zombie_pid)
      puts [alive_path, zombie_path, short_path, *paths].join(" ")
      puts Process.pid
    RUBY
    assert status.success?, err
    lines = out.lines.map(&:strip)
    assert_equal "[false, false, true]", lines[0]
    assert_equal "[false, true, true]", lines[1]
    # the parent's exit removed those of its children gone by then
    lines[2].split.each { |p| refute File.exist?(p), "#{p} left behind" }
    assert_equal 6, lines[2].split.uniq.size
    assert_empty Dir.glob("/dev/shm/.sdb-spare-#{lines[3]}-*"), "no spare registry left by the parent"
  end

  def test_stale_file_with_our_pid_is_replaced
    out, err, status = run_ruby(<<~RUBY)
      File.write("/dev/shm/sdb-\#{Process.pid}", "stale")
      require "sdb"
      puts Sdb.enabled?, SdbRegistryReader.read(Sdb.registry_path)["magic"].start_with?("SDBREG")
    RUBY
    assert status.success?, err
    assert_equal "true\ntrue\n", out
    assert_equal "", err
  end

  def test_sdb_disable_creates_nothing_and_patches_nothing
    out, err, status = run_ruby(<<~RUBY, "SDB_DISABLE" => "1")
      require "sdb"
      p Sdb.enabled?, Sdb.registry_path, File.exist?("/dev/shm/sdb-\#{Process.pid}"),
        Thread.ancestors.take(2), $LOADED_FEATURES.grep(/sdb_ext/).size
    RUBY
    assert status.success?, err
    assert_equal "", err
    assert_equal "false\nnil\nfalse\n[Thread, Object]\n0\n", out
  end

  def test_exec_removes_the_file_and_a_failed_exec_puts_it_back
    out, err, status = run_ruby(<<~RUBY)
      require "sdb"
      path = Sdb.registry_path
      begin
        exec("/nonexistent/sdb-test-binary")
      rescue SystemCallError
        p File.exist?(path), SdbRegistryReader.live_slots(path).size
      end
      p 1.respond_to?(:exec), Kernel.private_method_defined?(:exec)
      pid = fork { exec("sleep", "0.5") }
      sleep 0.2
      p File.exist?("/dev/shm/sdb-\#{pid}")
      Process.wait(pid)
    RUBY
    assert status.success?, err
    assert_equal "true\n1\nfalse\ntrue\nfalse\n", out
  end
end
