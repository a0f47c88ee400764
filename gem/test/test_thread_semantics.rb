# frozen_string_literal: true

require_relative "sdb_test_helper"

# With sdb loaded, threads behave exactly as in plain Ruby.
class TestThreadSemantics < Minitest::Test
  include SdbTestHelper

  # Runs script without and with sdb; returns both stdouts.
  def plain_and_with_sdb(script)
    plain, plain_err, = run_ruby(script)
    out, err, status = run_ruby(script, "WITH_SDB" => "1")
    assert status.success?, err
    [plain, out, plain_err, err]
  end

  def test_thread_new_without_a_block_raises_thread_error
    plain, out, = plain_and_with_sdb(<<~RUBY)
      require "sdb" if ENV["WITH_SDB"]
      [-> { Thread.new }, -> { Thread.start }, -> { Thread.fork }].each do |l|
        l.call
      rescue Exception => e
        p e
      end
    RUBY
    assert_equal plain, out
    assert_equal "#<ThreadError: must be called with a block>", out.lines.first.chomp
  end

  def test_thread_value_args_and_keywords_are_passed_through
    plain, out, = plain_and_with_sdb(<<~RUBY)
      require "sdb" if ENV["WITH_SDB"]
      p Thread.new(1, 2) { |a, b| a + b }.value,
        Thread.new([3, 4]) { |a, b| [a, b] }.value,
        Thread.new(5, k: 6) { |a, k:| [a, k] }.value,
        Thread.new({ h: 1 }) { |h| h }.value,
        Thread.start(7) { |a| a }.value,
        Thread.fork { :sym }.value,
        (Thread.new(&->(x) { x }).tap { |t| t.report_on_exception = false }.value rescue $!.class),
        Thread.new { Thread.current }.value.class
    RUBY
    assert_equal plain, out
    assert_equal "3\n[3, 4]\n[5, 6]\n#{{ h: 1 }.inspect}\n7\n:sym\nArgumentError\nThread\n", out
  end

  def test_exceptions_propagate_as_without_sdb
    script = <<~RUBY
      require "sdb" if ENV["WITH_SDB"]
      class Boom < StandardError; end
      t = Thread.new { raise Boom, "bang" }
      begin
        t.join
      rescue Boom => e
        puts "joined: \#{e.class}: \#{e.message}"
      end
      t2 = Thread.new { Thread.current.report_on_exception = false; raise Boom, "quiet" }
      puts "value: \#{(t2.value rescue $!.message)}"
      t3 = Thread.new { Thread.current.abort_on_exception = true; sleep 0.05; raise Boom, "abort" }
      begin
        sleep 1
        puts "not aborted"
      rescue Boom => e
        puts "main got: \#{e.message}"
      end
    RUBY
    plain_out, plain_err, = run_ruby(script)
    out, err, status = run_ruby(script, "WITH_SDB" => "1")
    assert status.success?, err
    assert_equal plain_out, out
    assert_equal "joined: Boom: bang\nvalue: quiet\nmain got: abort\n", out
    # report_on_exception still prints one report, for the first thread only
    assert_equal plain_err.scan(/terminated with exception/).size, err.scan(/terminated with exception/).size
    assert_equal 2, err.scan(/terminated with exception/).size
  end
end
