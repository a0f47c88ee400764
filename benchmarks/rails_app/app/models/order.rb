class Order < ApplicationRecord
  belongs_to :product

  validates :quantity, numericality: { greater_than: 0, less_than: 100 }
end
