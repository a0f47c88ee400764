# frozen_string_literal: true

require_relative "sdb_test_helper"

# Registries left by dead processes (exit!, SIGKILL) of this user are removed by the next process
# that creates one; a live process's registry, and anything that is not a registry of ours, stays.
class TestStaleRegistries < Minitest::Test
  include SdbTestHelper

  # Registries left behind by two fork children of one sdb process (a fork child publishes its
  # own registry): one ends by exit!, one by SIGKILL; both are forked before either ends, and the
  # parent ends by exit!, so that it neither forks nor exits after they are gone (it would remove
  # its children's files then: test_fork_and_exit.rb).
  def leave_registries_behind
    out, err, status = run_ruby(<<~RUBY)
      require "sdb"
      go_r, go_w = IO.pipe
      children = [-> { exit!(0) }, -> { Process.kill(:KILL, Process.pid); sleep }].map do |ending|
        r, w = IO.pipe
        pid = fork { r.close; w.puts(Sdb.registry_path); w.close; go_w.close; go_r.read; ending.call }
        w.close
        [pid, r.gets.strip]
      end
      go_w.close
      children.each { |pid, _| Process.wait(pid) }
      puts children.map(&:last)
      $stdout.flush
      exit!(0)
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
    # header.proc_start_ticks (offset 40): an earlier start than the sleeper's (the dead writer's
    # own may fall in the same clock tick as the sleeper's start)
    sleeper_ticks = Integer(File.read("/proc/#{sleeper}/stat").split(") ").last.split[19])
    bytes[40, 8] = [sleeper_ticks - 1].pack("Q")
    File.binwrite(reused, bytes)
    File.chmod(0o600, reused)
    # spare registries (a parent's, made ready for its next fork child): a dead process's goes, a
    # live one's stays
    live_pid = Integer(live_path[/\d+\z/])
    dead_spare = "/dev/shm/.sdb-spare-#{File.basename(by_exit).delete_prefix("sdb-")}-3"
    File.binwrite(dead_spare, File.binread(by_exit))
    live_spare = "/dev/shm/.sdb-spare-#{live_pid}-0"
    File.binwrite(live_spare, File.binread(live_path))
    [dead_spare, live_spare].each { |f| File.chmod(0o600, f) }
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
    refute File.exist?(dead_spare), "a dead process's spare registry removed"
    assert File.exist?(live_spare), "a live process's spare registry stays"
    assert File.exist?(junk), "a file that is not a registry stays"
    assert File.symlink?(link), "a symlink stays"
    assert_empty Dir.glob("/dev/shm/.sdb-stale-*"), "nothing left aside"
  ensure
    live&.puts
    live&.close
    Process.kill(:KILL, sleeper) rescue nil
    Process.wait(sleeper) rescue nil
    [by_exit, by_kill, reused, junk, dead_spare, live_spare].compact.each { |f| File.unlink(f) rescue nil }
    File.unlink(link) rescue nil if link
  end
end
