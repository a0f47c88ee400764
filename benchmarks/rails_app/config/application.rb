require_relative "boot"

require "fileutils"
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
require "action_view/railtie"

ENV["RAILS_ENV"] ||= "production"
# The SQLite file; the benchmark gives every server a fresh one (APP_DB)
ENV["APP_DB"] ||= File.expand_path("../../../build/rails_app/app.sqlite3", __dir__)
FileUtils.mkdir_p(File.dirname(ENV["APP_DB"]))

module BenchApp
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
  end
end
