# frozen_string_literal: true

require_relative "lib/sdb/version"

Gem::Specification.new do |s|
  s.name = "sdb"
  s.version = Sdb::VERSION
  s.summary = "Publishes a Ruby process's threads for the sdb stack profiler sidecar"
  s.description = <<~DESC
    require "sdb" publishes /dev/shm/sdb-<pid>: this Ruby's checked memory layout and one
    slot per live thread, read by the sdb sidecar to sample stacks from outside the process.
  DESC
  s.authors = ["sdb authors"]
  s.license = "MIT"
  s.homepage = "https://example.invalid/sdb"
  s.required_ruby_version = ">= 3.1"
  s.platform = Gem::Platform::RUBY
  s.files = Dir.chdir(__dir__) do
    Dir["ext/sdb/*.{c,h,rb}"] + Dir["lib/**/*.rb"]
  end
  s.extensions = ["ext/sdb/extconf.rb"]
  s.require_paths = ["lib"]
end
