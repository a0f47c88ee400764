# frozen_string_literal: true

module Sdb
  VERSION = "0.1.0"
end
