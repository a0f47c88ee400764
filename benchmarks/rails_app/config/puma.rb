# puma, single mode (no workers), a fixed thread pool: `ruby -S puma -C benchmarks/rails_app/config/puma.rb`
app_root = File.expand_path("..", __dir__)
directory app_root
rackup File.join(app_root, "config.ru")
threads_count = ENV.fetch("APP_THREADS", "5").to_i
threads threads_count, threads_count
bind "tcp://127.0.0.1:#{ENV.fetch("PORT", "3000")}"
environment "production"
workers 0
quiet
