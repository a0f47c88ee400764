class Product < ApplicationRecord
  has_many :orders

  def price
    price_cents / 100.0
  end

  def in_stock?
    stock.positive?
  end
end
