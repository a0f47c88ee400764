# frozen_string_literal: true

require "sdb"

module Sdb
  # Sidekiq server middleware: every job is one unit of work named after its class (an
  # ActiveJob's own class when Sidekiq wraps it), with its jid as the request id; status 0 when
  # it returned, 1 when it raised.
  class SidekiqMiddleware
    def call(_worker, job, _queue)
      parent = Spans.current
      span = Spans.open(KIND_JOB, nil)
      status = 1
      begin
        result = yield
        status = 0
        result
      ensure
        name, jid = job.is_a?(Hash) ? [job["wrapped"] || job["class"], job["jid"]] : []
        Spans.close(span, parent, name.is_a?(String) ? name : nil, jid.is_a?(String) ? jid : nil, status)
      end
    end
  end
end

if defined?(::Sidekiq) && ::Sidekiq.respond_to?(:configure_server) && Sdb.enabled? && ENV["SDB_REQUESTS"] != "0"
  ::Sidekiq.configure_server do |config|
    config.server_middleware { |chain| chain.add Sdb::SidekiqMiddleware }
  end
end
