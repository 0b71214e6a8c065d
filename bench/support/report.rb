# frozen_string_literal: true

# Formatting for bench/run.rb: Markdown tables and number formats.
module Report
  module_function

  # A Markdown table; +align+ is a string of "l"/"r", one per column.
  def table(header, rows, align: nil)
    align ||= "l#{"r" * (header.size - 1)}"
    rule = align.chars.map { |a| a == "r" ? "--:" : "---" }
    [header, rule, *rows].map { |cells| "| #{cells.join(" | ")} |" }.join("\n")
  end

  def int(num)
    return "-" if num.nil?

    num.round.to_s.gsub(/(\d)(?=(\d{3})+\z)/, "\\1,")
  end

  def float(num, digits = 1)
    num.nil? ? "-" : format("%.#{digits}f", num)
  end

  # A ratio "1.23x", or "-" when either side is missing.
  def ratio(num, den)
    return "-" if num.nil? || den.nil? || den.zero?

    format("%.2fx", num.fdiv(den))
  end

  def mib(kib)
    kib.nil? ? "-" : format("%.1f", kib / 1024.0)
  end

  def ms(seconds, digits = 1)
    seconds.nil? ? "-" : format("%.#{digits}f", seconds * 1000)
  end
end
