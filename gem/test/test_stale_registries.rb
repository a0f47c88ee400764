# frozen_string_literal: true

require_relative "sdb_test_helper"

# Registries left by dead processes (exit!, SIGKILL) of this user are removed by the next process
# that creates one; a live process's registry, and anything that is not a registry of ours, stays.
class TestStaleRegistries < Minitest::Test
  include SdbTestHelper

  # Registries left behind by two fork children of one sdb process (a fork child publishes its
  # own registry; only `require "sdb"` sweeps stale ones): one ends by exit!, one by SIGKILL.
  def leave_registries_behind
    out, err, status = run_ruby(<<~RUBY)
      require "sdb"
      paths = [-> { exit!(0) }, -> { Process.kill(:KILL, Process.pid); sleep }].map do |ending|
        r, w = IO.pipe
        pid = fork { r.close; w.puts(Sdb.registry_path); w.close; ending.call }
        w.close
        path = r.read.strip
        Process.wait(pid)
        path
      end
      puts paths
    RUBY
    assert status.success?, err
    paths = out.lines.map(&:strip)
    assert_equal 2, paths.size, out
    paths.each { |p| assert File.exist?(p), "#{p} was left behind" }
    paths
  end

  def test_registries_of_processes_gone_by_exit_bang_or_sigkill_are_removed_by_the_next_require
    # a live process of ours with sdb: its registry stays (started first: each require sweeps)
    live = IO.popen([RUBY, "-I", LIB, "-rsdb", "-e", "puts Sdb.registry_path; $stdout.flush; $stdin.gets"], "r+")
    live_path = live.gets.to_s.strip
    assert File.exist?(live_path), "live sdb process: #{live_path.inspect}"
    by_exit, by_kill = leave_registries_behind
    # the registry of a dead process copied under the pid of a live process started later (a
    # reused pid): its start time does not match, so it is stale
    sleeper = Process.spawn(RUBY, "-e", "sleep 30")
    reused = "/dev/shm/sdb-#{sleeper}"
    bytes = File.binread(by_exit)
    bytes[28, 4] = [sleeper].pack("L") # header.pid (offset 28)
    File.binwrite(reused, bytes)
    File.chmod(0o600, reused)
    # not registries: a dead pid's file without the magic, and a symlink
    dead_pid = Process.spawn(RUBY, "-e", "0").tap { |pid| Process.wait(pid) }
    junk = "/dev/shm/sdb-#{dead_pid}"
    File.write(junk, "not a registry " * 100)
    link = "/dev/shm/sdb-#{dead_pid + 1_000_000}"
    File.symlink(by_kill, link) unless File.exist?(link)

    out, err, status = run_ruby('require "sdb"; puts Sdb.enabled?')
    assert status.success?, err
    assert_equal "true\n", out
    refute File.exist?(by_exit), "stale registry of an exit! process removed"
    refute File.exist?(by_kill), "stale registry of a SIGKILLed process removed"
    refute File.exist?(reused), "registry whose pid now belongs to another process removed"
    assert File.exist?(live_path), "a live process's registry stays"
    assert File.exist?(junk), "a file that is not a registry stays"
    assert File.symlink?(link), "a symlink stays"
    assert_empty Dir.glob("/dev/shm/.sdb-stale-*"), "nothing left aside"
  ensure
    live&.puts
    live&.close
    Process.kill(:KILL, sleeper) rescue nil
    Process.wait(sleeper) rescue nil
    [by_exit, by_kill, reused, junk].compact.each { |f| File.unlink(f) rescue nil }
    File.unlink(link) rescue nil if link
  end
end
