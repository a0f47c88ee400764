Rails.application.routes.draw do
  get "/report", to: "reports#show"             # CPU-bound view: ERB with loops and helpers
  get "/products", to: "products#index"         # database read
  post "/orders", to: "orders#create"           # database write
  get "/api/products", to: "api#products"       # JSON of a few hundred objects
  get "/io", to: "io#show"                      # waits on IO (a pipe) for 5 ms
  get "/up", to: "io#up"                        # readiness probe
end
