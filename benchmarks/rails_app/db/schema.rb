ActiveRecord::Schema.define do
  create_table :products do |t|
    t.string :name, null: false
    t.string :sku, null: false
    t.integer :category, null: false
    t.integer :price_cents, null: false
    t.integer :stock, null: false
    t.text :description
    t.timestamps
  end
  add_index :products, [:category, :price_cents]

  create_table :orders do |t|
    t.references :product, null: false
    t.integer :quantity, null: false
    t.integer :total_cents, null: false
    t.timestamps
  end
end
