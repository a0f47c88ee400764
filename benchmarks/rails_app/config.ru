# The benchmark app as a Rack application: `ruby -S puma -C benchmarks/rails_app/config/puma.rb` (see README.md).
require_relative "config/environment"

run Rails.application
