# Database read: one category's products, cheapest first, as an HTML table.
class ProductsController < ApplicationController
  def index
    @category = params.fetch(:category, 0).to_i % 10
    @products = Product.where(category: @category).order(:price_cents).limit(25).to_a
  end
end
