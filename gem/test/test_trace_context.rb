# frozen_string_literal: true

require_relative "sdb_test_helper"

# A request's trace context (docs/registry-format.md, "Spans": a begin's trace id and span id) and
# the app's service name (the header's service_name).
class TestTraceContext < Minitest::Test
  include SdbTestHelper

  TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
  PARENT = "00f067aa0ba902b7"
  VALID = "00-#{TRACE}-#{PARENT}-01".freeze

  def test_traceparent_is_parsed_strictly_per_w3c_trace_context_version_00
    cases = {
      "valid" => VALID,
      "not_sampled" => "00-#{TRACE}-#{PARENT}-00",
      "upper_case" => VALID.upcase,
      "version_01" => "01-#{TRACE}-#{PARENT}-01",
      "version_ff" => "ff-#{TRACE}-#{PARENT}-01",
      "zero_trace" => "00-#{'0' * 32}-#{PARENT}-01",
      "zero_parent" => "00-#{TRACE}-#{'0' * 16}-01",
      "short_trace" => "00-#{TRACE[1..]}-#{PARENT}-01",
      "long" => "#{VALID}-extra",
      "two_joined" => "#{VALID}, #{VALID}",
      "trailing_space" => "#{VALID} ",
      "bad_flags" => "00-#{TRACE}-#{PARENT}-0g",
      "bad_hex" => "00-#{TRACE.sub('4', 'x')}-#{PARENT}-01",
      "dash_moved" => "00-#{TRACE}#{PARENT[0]}-#{PARENT[1..]}-01",
      "empty" => "",
    }
    r = run_json(<<~RUBY)
      require "sdb"
      cases = #{cases.inspect}
      out = cases.transform_values { |v| Sdb::Spans.trace_ids(v) }
      out["nil"] = Sdb::Spans.trace_ids(nil)
      out["symbol"] = Sdb::Spans.trace_ids(:x)
      puts JSON.dump(out)
    RUBY
    assert_equal [TRACE, PARENT], r.delete("valid")
    assert_equal [TRACE, PARENT], r.delete("not_sampled")   # the ids are the ids, sampled or not
    r.each { |name, ids| assert_nil ids, "#{name}: no ids" }
  end

  def test_opentelemetry_binary_ids_are_taken_when_both_are_whole_and_not_zero
    r = run_json(<<~RUBY)
      require "sdb"
      t, s = ["#{TRACE}"].pack("H*"), ["#{PARENT}"].pack("H*")
      puts JSON.dump("good" => Sdb::Spans.trace_ids(t, s),
                     "zero_trace" => Sdb::Spans.trace_ids("\\0".b * 16, s),
                     "zero_span" => Sdb::Spans.trace_ids(t, "\\0".b * 8),
                     "short" => Sdb::Spans.trace_ids(t[0, 15], s),
                     "span_not_string" => Sdb::Spans.trace_ids(t, 5))
    RUBY
    assert_equal [TRACE, PARENT], r.delete("good")
    r.each { |name, ids| assert_nil ids, "#{name}: no ids" }
  end

  # The middleware on a plain Rack env: the begin event carries the header's ids; a request without
  # the header, or with a malformed one, carries none; and the header costs no allocation.
  def test_the_middleware_publishes_the_traceparent_ids_with_the_request_begin_and_allocates_nothing_more
    r = run_json(<<~RUBY)
      require "sdb"
      require "sdb/middleware"
      app = Sdb::Middleware.new(->(_env) { [200, {}, ["ok"]] })
      with = { "REQUEST_METHOD" => "GET", "HTTP_TRACEPARENT" => "#{VALID}" }
      without = { "REQUEST_METHOD" => "GET" }
      bad = { "REQUEST_METHOD" => "GET", "HTTP_TRACEPARENT" => "00-#{'0' * 32}-#{PARENT}-01" }
      [with, without, bad].each { |env| app.call(env) }
      begins = SdbRegistryReader.spans(Sdb.registry_path).select { |e| e["what"] == 1 }
      GC.disable
      cost = [with, without].map do |env|
        2.times.map do
          before = GC.stat(:total_allocated_objects)
          200.times { app.call(env) }
          GC.stat(:total_allocated_objects) - before
        end.last
      end
      puts JSON.dump("begins" => begins.map { |e| e.values_at("trace_id", "span_id") }, "cost" => cost)
    RUBY
    assert_equal [[TRACE, PARENT], [nil, nil], [nil, nil]], r["begins"]
    with, without = r["cost"]
    assert_equal without, with,
                 "a traceparent header costs no allocation (#{with} vs #{without} objects / 200 requests)"
  end

  # OpenTelemetry's SDK is not installed here: this defines the one API the middleware calls
  # (OpenTelemetry::Trace.current_span -> a span whose #context has #valid?, #trace_id, #span_id, binary,
  # as opentelemetry-api's SpanContext), so it proves the lookup and the preference, not the SDK.
  def test_an_active_opentelemetry_span_gives_its_own_ids_over_the_traceparent_header
    r = run_json(<<~RUBY)
      require "sdb"
      require "sdb/middleware"
      module OpenTelemetry
        module Trace
          Context = Struct.new(:trace_id, :span_id) do
            def valid? = trace_id != ("\\0" * 16).b && span_id != ("\\0" * 8).b
          end
          Span = Struct.new(:context)
          INVALID = Span.new(Context.new(("\\0" * 16).b, ("\\0" * 8).b))
          class << self
            attr_accessor :span
            def current_span = span || INVALID
          end
        end
      end
      app = Sdb::Middleware.new(->(_env) { [200, {}, ["ok"]] })
      env = { "REQUEST_METHOD" => "GET", "HTTP_TRACEPARENT" => "#{VALID}" }
      ids = [["0af7651916cd43dd8448eb211c80319c"].pack("H*"), ["b7ad6b7169203331"].pack("H*")]
      OpenTelemetry::Trace.span = OpenTelemetry::Trace::Span.new(OpenTelemetry::Trace::Context.new(*ids))
      app.call(env)
      OpenTelemetry::Trace.span = nil    # no active span: the header's ids
      app.call(env)
      begins = SdbRegistryReader.spans(Sdb.registry_path).select { |e| e["what"] == 1 }
      puts JSON.dump(begins.map { |e| e.values_at("trace_id", "span_id") })
    RUBY
    assert_equal [%w[0af7651916cd43dd8448eb211c80319c b7ad6b7169203331], [TRACE, PARENT]], r
  end

  def test_the_service_name_is_sdb_service_name_else_otel_service_name_read_at_require
    script = <<~RUBY
      require "sdb"
      $service = SdbRegistryReader.read(Sdb.registry_path)["service_name"]
      child = fork { exit!(SdbRegistryReader.read(Sdb.registry_path)["service_name"] == $service ? 0 : 1) }
      Process.wait(child)
      puts JSON.dump("service" => $service, "child_same" => $?.success?)
    RUBY
    both = run_json(script, "SDB_SERVICE_NAME" => "checkout", "OTEL_SERVICE_NAME" => "otel-name")
    assert_equal({ "service" => "checkout", "child_same" => true }, both)
    assert_equal "otel-name", run_json(script, "SDB_SERVICE_NAME" => "", "OTEL_SERVICE_NAME" => "otel-name")["service"]
    assert_equal "", run_json(script)["service"]
  end

  def test_a_service_name_too_long_for_the_header_is_not_published_and_says_so
    out, err, status = run_ruby(<<~RUBY, "SDB_SERVICE_NAME" => "s" * 128, "OTEL_SERVICE_NAME" => "short")
      require "sdb"
      puts JSON.dump("service" => SdbRegistryReader.read(Sdb.registry_path)["service_name"], "on" => Sdb.enabled?)
    RUBY
    assert status.success?, err
    assert_equal({ "service" => "", "on" => true }, JSON.parse(out.lines.last))
    assert_match(/SDB_SERVICE_NAME is longer than 127 bytes/, err)
  end
end
