# No migrations: the schema and a deterministic catalogue are created when the database is empty.
Rails.application.config.after_initialize do
  conn = ActiveRecord::Base.connection
  unless conn.table_exists?(:products)
    conn.execute("PRAGMA journal_mode=WAL")
    ActiveRecord::Schema.verbose = false
    load Rails.root.join("db", "schema.rb")
    now = Time.utc(2026, 1, 1)
    Product.insert_all(Array.new(1000) do |n|
      { name: "Product #{n}", sku: format("SKU-%05d", n), category: n % 10, price_cents: 199 + (n * 7919) % 50_000,
        stock: 1_000_000, description: "A very ordinary product number #{n}, " * 3, created_at: now, updated_at: now }
    end)
  end
  ActiveRecord::Base.connection_pool.disconnect!
end
