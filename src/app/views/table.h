// Column-aligned plain-text tables (amptune compare / status / list / show / run / bench).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace amptune::app {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "%.*f": fixed(2.5, 1) = "2.5".
std::string fixed(double value, int decimals);
// "%.*g": significant(0.000123456, 3) = "0.000123".
std::string significant(double value, int digits);
// `text` in at most `max` characters (max >= 5): a longer one keeps its start and end (where run
// labels put the first and last swept value) around "...".
std::string shortened(const std::string& text, size_t max);

}  // namespace amptune::app
