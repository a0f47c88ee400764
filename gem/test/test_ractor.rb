# frozen_string_literal: true

require_relative "sdb_test_helper"

# Threads of non-main Ractors are left alone: Ruby's thread events of a Ractor reach only the
# hooks of that Ractor, so sdb (hooked in the main Ractor) neither registers them nor runs any
# Ruby code in them. They run exactly as without sdb.
class TestRactor < Minitest::Test
  include SdbTestHelper

  RACTOR_PROGRAM = <<~RUBY
    require "sdb" if ENV["WITH_SDB"]
    Warning[:experimental] = false
    take = ->(r) { r.respond_to?(:value) ? r.value : r.take }
    # one Ractor at a time: several Ractors starting threads at once hang Ruby 3.3/3.4 themselves here
    values = 3.times.map { |i| take.call(Ractor.new(i) { |n| Thread.new { Thread.new { n * 2 }.value + 1 }.value }) }
    # the Ractor says it is parked: Ractor.yield up to 3.4, a Ractor::Port from 4.0 (no Ractor.yield there)
    if defined?(Ractor::Port)
      port = Ractor::Port.new
      parked = Ractor.new(port) { |said| t = Thread.new { Ractor.receive }; said << :parked; t.value }
      port.receive
    else
      parked = Ractor.new { t = Thread.new { Ractor.receive }; Ractor.yield(:parked); t.value }
      take.call(parked)
    end
    live = defined?(Sdb) ? SdbRegistryReader.live_slots(Sdb.registry_path).map { |s| s["flags"] } : nil
    parked.send(:done)
    puts JSON.dump("values" => values, "parked" => take.call(parked).to_s, "main" => Thread.new { :ok }.value.to_s,
                   "live" => live, "enabled" => defined?(Sdb) ? Sdb.enabled? : nil)
  RUBY

  # Ruby's Ractors themselves hang now and then in this program, every thread of the process waiting
  # (seen once on 3.3.8 without sdb, once on 3.1 with it: the main thread in Ractor#take, the
  # Ractor's threads in Ractor.receive; sdb runs no code in those Ractors): a run that has not ended
  # in 60 s is killed and run again, up to 3 times, and each hang is told.
  def run_ractors(env = {})
    3.times do |attempt|
      out, err, status = run_ruby(RACTOR_PROGRAM, env, 60)
      return [out, err, status] unless status.termsig == 9
      warn "test_ractor: Ruby hung in its Ractors (#{env.empty? ? "without" : "with"} sdb), attempt #{attempt + 1}"
    end
    flunk "the Ractor program hung 3 times in a row (#{env.empty? ? "without" : "with"} sdb)"
  end

  def test_threads_started_inside_ractors_run_as_without_sdb_and_are_not_registered
    plain_out, plain_err, plain_status = run_ractors
    out, err, status = run_ractors("WITH_SDB" => "1")
    assert plain_status.success?, plain_err
    assert status.success?, "with sdb: #{status.inspect}\n#{err}"
    assert_equal plain_err, err
    r, plain = JSON.parse(out), JSON.parse(plain_out)
    assert_equal [1, 3, 5], r["values"]
    assert_equal plain["values"], r["values"]
    assert_equal "done", r["parked"]
    assert_equal "ok", r["main"]
    assert_equal true, r["enabled"]
    # a non-main Ractor's thread was alive and parked: only the main thread has a slot
    assert_equal [1 | 2], r["live"] # SDB_SLOT_MAIN | SDB_SLOT_ADOPTED
  end

  # What an app may call of the gem, called inside non-main Ractors: each call's value or the
  # class of what it raised. Then the main Ractor's own span, and what its span ring holds.
  API_PROGRAM = <<~RUBY
    require "sdb"
    Warning[:experimental] = false
    take = ->(r) { r.respond_to?(:value) ? r.value : r.take }
    def call(name)
      case name
      when "enabled?" then Sdb.enabled?
      when "registry_path" then Sdb.registry_path.is_a?(String) || Sdb.registry_path.nil?
      when "label" then Sdb.label(endpoint: "in a ractor", request_id: "r1") { :labelled }
      when "current" then Sdb::Spans.current
      when "open" then Sdb::Spans.open(Sdb::KIND_JOB, "ractor job")
      when "close" then Sdb::Spans.close(1, 0, "ractor job", nil, 0)
      when "thread name=" then (Thread.current.name = "in a ractor"; Thread.current.name)
      end
    end
    NAMES = ["enabled?", "registry_path", "label", "current", "open", "close", "thread name="].freeze
    out = NAMES.to_h do |name|
      r = Ractor.new(name) { |n| begin; [:ok, call(n)]; rescue Exception => e; [:raised, e.class.name]; end }
      [name, take.call(r).map(&:to_s)]
    end
    span = Sdb::Spans.open(Sdb::KIND_JOB, "main job")
    Sdb::Spans.close(span, 0, "main job", nil, 0)
    puts JSON.dump("calls" => out, "main_span" => span, "enabled" => Sdb.enabled?,
                   "span_head" => Sdb.enabled? ? SdbRegistryReader.read(Sdb.registry_path)["span_head"] : nil)
  RUBY

  def test_the_gems_methods_never_raise_in_a_non_main_ractor_and_publish_nothing_there
    r = run_json(API_PROGRAM)
    plain = run_json(API_PROGRAM, "SDB_DISABLE" => "1") # the gem's Ruby fallbacks alone, no extension
    assert_equal true, r["enabled"]
    # THEN every call returns what it returns without the extension (enabled? says what the process is)
    assert_equal({ "enabled?" => %w[ok true], "registry_path" => %w[ok true], "label" => %w[ok labelled],
                   "current" => %w[ok 0], "open" => %w[ok 0], "close" => ["ok", ""], "thread name=" => ["ok", "in a ractor"] },
                 r["calls"])
    assert_equal r["calls"].merge("enabled?" => %w[ok false]), plain["calls"]
    # AND nothing was written by the other Ractors: the main Ractor's span is the first, its begin
    # and end the ring's only two entries
    assert_equal 1, r["main_span"]
    assert_equal 2, r["span_head"]
  end
end
