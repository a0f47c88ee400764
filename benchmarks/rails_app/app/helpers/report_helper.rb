module ReportHelper
  def revenue(row)
    row[:units].sum * row[:price]
  end

  def trend(units)
    first, last = units.first(3).sum, units.last(3).sum
    return "flat" if first == last

    last > first ? "up" : "down"
  end

  def sparkline(units)
    bars = " ▁▂▃▄▅▆▇█"
    max = units.max.nonzero? || 1
    units.map { |u| bars[(u * (bars.size - 1)) / max] }.join
  end
end
