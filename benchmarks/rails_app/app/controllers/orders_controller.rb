# Database write: an order and the product's stock, in one transaction.
class OrdersController < ApplicationController
  # SQLite has one writer at a time, and a deferred transaction that must upgrade its lock while
  # another waits fails at once with "database is locked" (no busy wait can help). puma's threads
  # share one process, so they take turns here, as SQLite apps on one server do.
  WRITE_LOCK = Mutex.new

  def create
    product = Product.find(params.fetch(:product_id, 1).to_i % 1000 + 1)
    quantity = params.fetch(:quantity, 1).to_i
    order = nil
    WRITE_LOCK.synchronize do
      Product.transaction do
        order = Order.create!(product: product, quantity: quantity, total_cents: product.price_cents * quantity)
        product.update!(stock: product.stock - quantity)
      end
    end
    render json: { id: order.id, total_cents: order.total_cents }, status: :created
  end
end
