# CPU-bound: no database, a sales report computed in Ruby and rendered by a template full of loops
# and helpers.
class ReportsController < ApplicationController
  REGIONS = %w[north south east west central].freeze

  def show
    seed = params.fetch(:seed, 1).to_i
    @rows = Array.new(40) do |n|
      units = Array.new(12) { |m| ((n + 1) * (m + 3) * (seed + 7)) % 97 }
      { name: "Line #{n}", region: REGIONS[n % REGIONS.size], units: units, price: 3.5 + (n % 17) * 1.25 }
    end
  end
end
