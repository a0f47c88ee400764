# frozen_string_literal: true

require_relative "sdb_test_helper"

# Units of work (spans): Sdb.label and the middlewares write begin/end events into the registry's
# span ring and name the running span in the thread's slot (docs/registry-format.md, "Spans").
class TestSpans < Minitest::Test
  include SdbTestHelper

  def test_a_label_writes_its_begin_and_end_and_names_itself_in_the_slot_while_it_runs
    r = run_json(<<~RUBY)
      require "sdb"
      path = Sdb.registry_path
      me = SdbRegistryReader.live_slots(path).find { |s| s["flags"] & Sdb::SLOT_MAIN != 0 }
      inside = nil
      value = Sdb.label(endpoint: "Checkout#create", request_id: "req-1") do
        inside = SdbRegistryReader.live_slots(path).find { |s| s["serial"] == me["serial"] }
        :done
      end
      after = SdbRegistryReader.live_slots(path).find { |s| s["serial"] == me["serial"] }
      puts JSON.dump("value" => value.to_s, "serial" => me["serial"], "inside" => inside["span"],
                     "inside_ec" => inside["span_ec"], "after" => after["span"],
                     "events" => SdbRegistryReader.spans(path))
    RUBY
    assert_equal "done", r["value"]
    begin_ev, end_ev = r["events"]
    assert_equal 2, r["events"].size
    assert_equal [1, 3, r["inside"], 0, r["serial"]], begin_ev.values_at("what", "kind", "span", "parent", "thread_serial")
    assert_equal "Checkout#create", begin_ev["endpoint_name"]
    assert_equal [2, r["inside"], "req-1", "Checkout#create"], end_ev.values_at("what", "span", "request_id", "endpoint_name")
    assert_operator r["inside"], :>, 0
    assert_operator r["inside_ec"], :>, 0
    assert_equal 0, r["after"]
    assert_operator end_ev["at_ns"], :>=, begin_ev["at_ns"]
    assert_equal [2, 4], r["events"].map { |e| e["seq"] }   # seq 2i+2: whole
  end

  def test_a_nested_label_names_its_parent_and_the_thread_returns_to_it
    r = run_json(<<~RUBY)
      require "sdb"
      path = Sdb.registry_path
      me = SdbRegistryReader.live_slots(path).find { |s| s["flags"] & Sdb::SLOT_MAIN != 0 }
      slot = -> { SdbRegistryReader.live_slots(path).find { |s| s["serial"] == me["serial"] }["span"] }
      back = nil
      Sdb.label(endpoint: "outer") do
        Sdb.label(endpoint: "inner") { }
        back = slot.()
      end
      puts JSON.dump("back" => back, "events" => SdbRegistryReader.spans(path))
    RUBY
    outer, inner = r["events"].select { |e| e["what"] == 1 }
    assert_equal outer["span"], inner["parent"]
    assert_equal outer["span"], r["back"]
  end

  def test_a_label_whose_block_raises_ends_and_the_error_reaches_the_caller
    r = run_json(<<~RUBY)
      require "sdb"
      err = begin
        Sdb.label(endpoint: "Boom") { raise ArgumentError, "boom" }
      rescue ArgumentError => e
        e.message
      end
      ev = SdbRegistryReader.spans(Sdb.registry_path)
      puts JSON.dump("err" => err, "whats" => ev.map { |e| e["what"] })
    RUBY
    assert_equal "boom", r["err"]
    assert_equal [1, 2], r["whats"]
  end

  def test_labels_allocate_nothing_once_their_endpoint_was_seen
    r = run_json(<<~RUBY)
      require "sdb"
      name = "Report#show"
      GC.disable
      # the first round warms Ruby's own caches (method and inline caches allocate once)
      2.times do
        before = GC.stat(:total_allocated_objects)
        1000.times { Sdb.label(endpoint: name) { } }
        $after = GC.stat(:total_allocated_objects) - before
      end
      after = $after
      puts JSON.dump("allocated" => after,
                     "events" => SdbRegistryReader.read(Sdb.registry_path)["span_head"])
    RUBY
    assert_equal 0, r["allocated"]
    assert_equal 4000, r["events"]
  end

  def test_an_id_too_long_for_its_field_and_a_name_too_long_to_keep_are_left_out_and_counted
    r = run_json(<<~RUBY)
      require "sdb"
      Sdb.label(endpoint: "x" * 1025, request_id: "r" * 64) { }
      path = Sdb.registry_path
      puts JSON.dump("events" => SdbRegistryReader.spans(path),
                     "refused" => SdbRegistryReader.read(path)["strings_refused"])
    RUBY
    r["events"].each do |e|
      assert_equal 0, e["endpoint"]
      assert_equal "", e["request_id"]
    end
    assert_equal 2, r["refused"]
  end

  def test_the_rack_middleware_makes_each_request_a_span_named_after_its_route
    r = run_json(<<~RUBY)
      require "sdb"
      require "sdb/middleware"
      app = Sdb::Middleware.new(->(env) { [env["want"], {}, ["ok"]] })
      app.call("REQUEST_METHOD" => "GET", "PATH_INFO" => "/products/7", "want" => 200,
               "HTTP_X_REQUEST_ID" => "abc")
      app.call("REQUEST_METHOD" => "POST", "sdb.endpoint" => "Orders#create", "want" => 201)
      app.call("REQUEST_METHOD" => "GET", "sinatra.route" => "GET /products/:id", "want" => 404)
      ends = SdbRegistryReader.spans(Sdb.registry_path).select { |e| e["what"] == 2 }
      puts JSON.dump("ends" => ends.map { |e| e.values_at("endpoint_name", "status", "request_id") },
                     "kinds" => SdbRegistryReader.spans(Sdb.registry_path).select { |e| e["what"] == 1 }.map { |e| e["kind"] })
    RUBY
    assert_equal [["GET (no route)", 200, "abc"], ["Orders#create", 201, ""], ["GET /products/:id", 404, ""]], r["ends"]
    assert_equal [1, 1, 1], r["kinds"]
  end

  def test_the_middleware_passes_what_the_app_raises_or_returns_through_unchanged
    r = run_json(<<~RUBY)
      require "sdb"
      require "sdb/middleware"
      boom = Sdb::Middleware.new(->(_env) { raise IOError, "disk" })
      odd = Sdb::Middleware.new(->(_env) { :not_a_rack_response })
      bad_controller = Object.new
      def bad_controller.action_name = raise("no action")
      err = begin
        boom.call("REQUEST_METHOD" => "GET")
      rescue IOError => e
        e.message
      end
      got = odd.call("REQUEST_METHOD" => "GET", "action_controller.instance" => bad_controller)
      ends = SdbRegistryReader.spans(Sdb.registry_path).select { |e| e["what"] == 2 }
      puts JSON.dump("err" => err, "got" => got.to_s, "ends" => ends.map { |e| e.values_at("status", "endpoint") })
    RUBY
    assert_equal "disk", r["err"]
    assert_equal "not_a_rack_response", r["got"]
    # both requests are ended: the one that raised with 500, the odd one with no endpoint (its
    # controller raised while being named) rather than a guess
    assert_equal 500, r["ends"][0][0]
    assert_equal [500, 0], r["ends"][1]
  end

  def test_without_sdb_a_label_only_runs_its_block
    r = run_json(<<~RUBY, "SDB_DISABLE" => "1")
      require "sdb"
      puts JSON.dump("v" => Sdb.label(endpoint: "x") { 7 }, "enabled" => Sdb.enabled?)
    RUBY
    assert_equal({ "v" => 7, "enabled" => false }, r)
  end
end
