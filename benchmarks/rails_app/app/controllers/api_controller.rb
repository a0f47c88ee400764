# A JSON API: a few hundred products serialised.
class ApiController < ActionController::API
  def products
    offset = params.fetch(:page, 0).to_i % 3 * 300
    products = Product.order(:id).offset(offset).limit(300)
    render json: {
      page: offset / 300,
      products: products.as_json(only: %i[id name sku category stock created_at], methods: %i[price in_stock?])
    }
  end
end
