# The shop of ractor_app.rb: loaded plainly, or under RUBY_BOX=1 into a Ruby::Box of its own (its
# classes and its reopened core class then live in that box, their class data in its classext).
module Shop
  def self.cents(n, &blk) = n.shop_cents(&blk)                     # called from outside the box

  module Pricing
    def self.total(item, &blk) = item + Cart.tax(&blk)             # a module's singleton method
  end

  class Cart
    def self.tax(&blk) = blk.call                                    # a class's singleton method

    def initialize(items)
      @items = items
    end

    def checkout(&blk)
      @items.each { |item| Pricing.total(item, &blk) }               # a block in a method
    end
  end
end

class Integer                                                        # a core class reopened here
  def shop_cents(&blk) = Shop::Cart.new([self]).checkout(&blk)
end
