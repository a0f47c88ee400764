# puma: `ruby -S puma -C benchmarks/rails_app/config/puma.rb`. Single mode (no workers) with a fixed thread
# pool by default; APP_WORKERS=N: cluster mode, N workers forked from a master that loaded the app
# (preload_app!: the sdb gem is loaded in the master, each worker publishes its own registry).
app_root = File.expand_path("..", __dir__)
directory app_root
rackup File.join(app_root, "config.ru")
threads_count = ENV.fetch("APP_THREADS", "5").to_i
threads threads_count, threads_count
bind "tcp://127.0.0.1:#{ENV.fetch("PORT", "3000")}"
environment "production"
workers_count = ENV.fetch("APP_WORKERS", "0").to_i
workers workers_count
preload_app! if workers_count > 0
quiet
