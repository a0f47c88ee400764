# frozen_string_literal: true

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
        Spans.close(span, parent, job["wrapped"] || job["class"], job["jid"], status)
      end
    end
  end
end

if defined?(::Sidekiq) && ::Sidekiq.respond_to?(:configure_server)
  ::Sidekiq.configure_server do |config|
    config.server_middleware { |chain| chain.add Sdb::SidekiqMiddleware }
  end
end
