# frozen_string_literal: true

require "sdb/middleware"

module Sdb
  # Puts Sdb::Middleware first in the Rails middleware stack, so a request's span covers the whole
  # stack (the latency a client sees, less the server's own parsing and writing). `require "sdb"`
  # loads this when Rails is there already (Bundler.require); an app that loads sdb before Rails
  # (config/boot.rb) requires "sdb/railtie" after Rails. Nothing is added when sdb is off or
  # SDB_REQUESTS=0.
  class Railtie < ::Rails::Railtie
    initializer "sdb.middleware" do |app|
      app.middleware.insert(0, Sdb::Middleware) if Sdb.enabled? && ENV["SDB_REQUESTS"] != "0"
    end
  end
end
