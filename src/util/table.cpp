#include "fact/util/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace fact::util {

size_t display_width(std::string_view text) {
  size_t width = 0;
  for (unsigned char c : text) width += (c & 0xC0) != 0x80;
  return width;
}

std::string format_fixed(double value, int decimals) {
  if (std::isnan(value)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

Table::Table(std::vector<Column> columns, std::string gap)
    : columns_(std::move(columns)), gap_(std::move(gap)) {}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() > columns_.size())
    throw std::invalid_argument("table row has " + std::to_string(cells.size()) + " cells for " +
                                std::to_string(columns_.size()) + " columns");
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::add_separator() { rows_.emplace_back(); }

size_t Table::row_count() const {
  return static_cast<size_t>(std::count_if(rows_.begin(), rows_.end(),
                                           [](const auto& row) { return !row.empty(); }));
}

std::string Table::render() const {
  std::vector<size_t> widths(columns_.size(), 0);
  for (size_t c = 0; c < columns_.size(); ++c) widths[c] = display_width(columns_[c].header);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = cells[c];
      const size_t pad = widths[c] - display_width(cell);
      const bool last = c + 1 == columns_.size();
      if (c > 0) line += gap_;
      if (columns_[c].align == Align::Right) {
        line.append(pad, ' ');
        line += cell;
      } else {
        line += cell;
        if (!last) line.append(pad, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  std::vector<std::string> header;
  std::vector<std::string> rule;
  for (size_t c = 0; c < columns_.size(); ++c) {
    header.push_back(columns_[c].header);
    rule.push_back(std::string(widths[c], '-'));
  }
  emit(header);
  emit(rule);
  for (const auto& row : rows_) emit(row.empty() ? rule : row);
  return out;
}

}  // namespace fact::util
