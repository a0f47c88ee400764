require_relative "boot"
require "json"

require "fileutils"
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
require "action_view/railtie"
# sdb was loaded in boot.rb, before Rails: its Railtie (Sdb::Middleware first in the stack, each
# request a unit of work named after its action) is required after Rails, as README says
require "sdb/railtie" if defined?(Sdb) && Sdb.enabled?

ENV["RAILS_ENV"] ||= "production"
# The SQLite file; the benchmark gives every server a fresh one (APP_DB)
ENV["APP_DB"] ||= File.expand_path("../../../build/rails_app/app.sqlite3", __dir__)
FileUtils.mkdir_p(File.dirname(ENV["APP_DB"]))

module BenchApp
  # The app's own request log (APP_REQUEST_LOG=path; off by default): one JSON line per request with
  # its action, request id and duration as the app measured it around the rest of the stack. What
  # tests/integration/test_requests_rails.py holds sdb's request spans against.
  class RequestLog
    def initialize(app)
      @app = app
      @lines = [] # kept in memory, written at exit: a shared file and its lock would be what the
      path = ENV.fetch("APP_REQUEST_LOG") # requests wait for (sdb showed them blocked there)
      at_exit { File.write(path, @lines.join("\n") + "\n", mode: "a") }
    end

    def call(env)
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      response = @app.call(env)
      ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
      c = env["action_controller.instance"]
      @lines << JSON.dump("endpoint" => c && "#{c.class.name}##{c.action_name}", "ms" => ms,
                          "request_id" => env["action_dispatch.request_id"], "status" => response[0].to_i,
                          "at" => t0)
      response
    end
  end

  class Application < Rails::Application
    config.load_defaults 6.1
    config.root = File.expand_path("..", __dir__)
    config.eager_load = true
    config.cache_classes = true
    config.consider_all_requests_local = false
    config.secret_key_base = "sdb-rails-benchmark-app-not-a-secret"
    config.require_master_key = false
    # a JSON API and a form-less write endpoint: no CSRF tokens
    config.action_controller.allow_forgery_protection = false
    config.logger = ActiveSupport::Logger.new($stderr, level: :warn)
    config.log_level = :warn
    config.public_file_server.enabled = false
    config.cache_store = :null_store
    config.middleware.insert(0, RequestLog) if ENV["APP_REQUEST_LOG"]
  end
end
