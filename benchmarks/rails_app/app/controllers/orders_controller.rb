# Database write: an order and the product's stock, in one transaction.
class OrdersController < ApplicationController
  def create
    product = Product.find(params.fetch(:product_id, 1).to_i % 1000 + 1)
    quantity = params.fetch(:quantity, 1).to_i
    order = nil
    Product.transaction do
      order = Order.create!(product: product, quantity: quantity, total_cents: product.price_cents * quantity)
      product.update!(stock: product.stock - quantity)
    end
    render json: { id: order.id, total_cents: order.total_cents }, status: :created
  end
end
