# A small multi-threaded "shop" for the sdb demo: each thread does recognizable work in
# methods with clear names, so a profile of it reads like its source.
#   ruby -rsdb examples/shop.rb [seconds]
require "sdb"
require "json"

module Shop
  Item = Struct.new(:sku, :price, :qty)

  class Pricing
    def initialize(items) = @items = items

    def total_with_tax
      @items.sum { |i| line_total(i) } * 1.2
    end

    def line_total(item)
      discount(item) * item.qty
    end

    def discount(item)
      p = item.price
      20.times { p = (p * 0.999).round(4) }
      p
    end
  end

  class Invoice
    def initialize(items) = @items = items

    def render
      @items.map { |i| format_line(i) }.join("\n")
    end

    def format_line(item)
      format("%-10s %6.2f x %3d", item.sku, item.price, item.qty)
    end
  end

  class Inventory
    def initialize
      @lock = Mutex.new
      @stock = Hash.new(100)
    end

    def reserve(sku)
      @lock.synchronize do
        wait_for_warehouse
        @stock[sku] -= 1
      end
    end

    def wait_for_warehouse = sleep(0.002)
  end

  module Catalog
    def self.export(items)
      JSON.generate(items.map(&:to_h))
    end
  end
end

seconds = (ARGV[0] || 30).to_f
items = Array.new(200) { |n| Shop::Item.new("SKU#{n}", 1.0 + n, 1 + n % 5) }
inventory = Shop::Inventory.new
stop = false

threads = []
threads << Thread.new { Thread.current.name = "pricing"; Shop::Pricing.new(items).total_with_tax until stop }
threads << Thread.new { Thread.current.name = "invoices"; Shop::Invoice.new(items).render until stop }
threads << Thread.new { Thread.current.name = "catalog"; Shop::Catalog.export(items) until stop }
2.times do |n|
  threads << Thread.new { Thread.current.name = "reserver-#{n}"; inventory.reserve("SKU#{n}") until stop }
end

$stdout.puts "ready #{Process.pid}"
$stdout.flush
sleep seconds
stop = true
threads.each(&:join)
