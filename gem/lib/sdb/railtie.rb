# frozen_string_literal: true

require "sdb/middleware"

module Sdb
  # Puts Sdb::Middleware first in the Rails middleware stack, so a request's span covers the whole
  # stack (the latency a client sees, less the server's own parsing and writing).
  class Railtie < ::Rails::Railtie
    initializer "sdb.middleware" do |app|
      app.middleware.insert(0, Sdb::Middleware)
    end
  end
end
