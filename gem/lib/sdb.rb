# frozen_string_literal: true

# sdb: publishes this process's Ruby threads to the sdb sidecar.
#
# `require "sdb"` creates /dev/shm/sdb-<pid> (docs/registry-format.md),
# checks this Ruby's memory layout and keeps one registry slot per live
# thread. All of it is done from C (gem/ext/sdb/*.c): threads alive now are
# adopted, later ones register in Ruby's thread-begin event and are released
# at their end; no Ruby method is patched and no module is prepended, so the
# app sees no frame, label or ancestor of sdb. SDB_DISABLE=1 turns it off.
require "sdb/version"

module Sdb
  class << self
    # true when the registry is published and the layout check passed.
    def enabled?
      respond_to?(:__enabled?, true) ? __enabled? : false
    end

    # "/dev/shm/sdb-<pid>", or nil when no registry file exists.
    def registry_path
      respond_to?(:__registry_path, true) ? __registry_path : nil
    end

    # Runs the block as one unit of work named `endpoint` (a String: "CheckoutJob",
    # "GraphQL query Products"), with `request_id` if given: the sidecar attributes the samples of
    # this thread (on this fiber) to it while the block runs, and the trace keeps its start, end
    # and names. Nests: a label inside a request is its own unit, within the request. Returns the
    # block's value; raises what the block raises. Without sdb running it just yields.
    def label(endpoint:, request_id: nil)
      parent = Spans.current
      span = Spans.open(KIND_LABEL, endpoint)
      begin
        yield
      ensure
        Spans.close(span, parent, endpoint, request_id, 0)
      end
    end

    private

    # __open through a method that a method calls: the C side checks, on these two frames, the
    # caller/callee link the sidecar relies on (sdb_check.c: sdb_check_link). The callee has five
    # locals: with none, a wrong local_table_size offset that reads a zero (ise_size on 3.3)
    # would pass the check.
    def __start = __open_from_ruby(1, 2, 3, 4, 5)
    def __open_from_ruby(_a, _b, _c, _d, _e) = __open
  end
end

if ENV["SDB_DISABLE"] != "1"
  require "sdb/sdb_ext"
  sdb_reason = Sdb.__send__(:__start)
  warn "sdb: #{sdb_reason}" if sdb_reason
end

unless defined?(Sdb::Spans)
  # SDB_DISABLE=1: nothing published; Sdb.label and the middlewares only run the app's code
  module Sdb
    KIND_REQUEST = 1
    KIND_JOB = 2
    KIND_LABEL = 3
    module Spans
      def self.current = 0
      def self.open(_kind, _endpoint, _trace = nil, _span_id = nil) = 0
      def self.close(_span, _parent, _endpoint, _request_id, _status) = nil
    end
  end
end

# Per-request attribution, wired where the app has the framework (README "Requests and jobs"):
# Rails gets the Rack middleware from a Railtie, Sidekiq the server middleware; SDB_REQUESTS=0
# leaves both out. A plain Rack app adds `use Sdb::Middleware` itself.
if ENV["SDB_REQUESTS"] != "0" && Sdb.enabled?
  require "sdb/railtie" if defined?(::Rails::Railtie)
  require "sdb/sidekiq" if defined?(::Sidekiq)
end
