#include "app/views/table.h"

#include <algorithm>
#include <cstdio>

#include "core/log.h"

namespace amptune::app {

void Table::print(std::ostream& out) const {
  // Cells come from databases and sweep files: printed with control characters escaped.
  std::vector<std::vector<std::string>> rows;
  rows.reserve(rows_.size());
  for (const auto& r : rows_) {
    std::vector<std::string> row;
    for (const auto& cell : r) row.push_back(log::printable(cell));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  measure(header_);
  for (auto& r : rows) measure(r);
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      out << cell;
      if (i + 1 < width.size()) out << std::string(width[i] - cell.size() + 2, ' ');
    }
    out << '\n';
  };
  line(header_);
  for (auto& r : rows) line(r);
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string significant(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, value);
  return buf;
}

std::string shortened(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  const size_t head = (max - 3) / 2;
  return text.substr(0, head) + "..." + text.substr(text.size() - (max - 3 - head));
}

}  // namespace amptune::app
