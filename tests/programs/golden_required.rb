# Required by golden.rb in a thread of its own: that thread parks in this class body, so its
# stack holds `<class:Required>` and `<top (required)>`.
module Zoo
  class Required
    SdbGolden.arm(:sleep); $golden_started << :required; sleep
  end
end
