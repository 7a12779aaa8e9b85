#include "store/migrations.h"

#include <cctype>

#include "core/error.h"

namespace amptune::store {

namespace {

constexpr std::string_view kMarker = "-- migration:";

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

}  // namespace

std::vector<Migration> parse_migrations(std::string_view text) {
  std::vector<Migration> migrations;
  int line_number = 0;
  size_t position = 0;
  while (position < text.size()) {
    size_t end = text.find('\n', position);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(position, end - position);
    position = end + 1;
    ++line_number;
    std::string_view stripped = trim(line);
    const std::string where = "schemas/store.sql:" + std::to_string(line_number);
    if (stripped.substr(0, kMarker.size()) == kMarker) {
      std::string number(trim(stripped.substr(kMarker.size())));
      int version = 0;
      try {
        size_t used = 0;
        version = std::stoi(number, &used);
        if (used != number.size()) version = 0;
      } catch (const std::exception&) {
        version = 0;
      }
      const int expected = static_cast<int>(migrations.size()) + 1;
      if (version != expected) {
        throw StoreError(where + ": expected '-- migration: " + std::to_string(expected) +
                         "', got '" + std::string(stripped) + "'; migrations count 1, 2, 3, ...");
      }
      migrations.push_back({version, ""});
      continue;
    }
    if (migrations.empty()) {
      if (!stripped.empty() && stripped.substr(0, 2) != "--") {
        throw StoreError(where + ": SQL before the first '-- migration: 1' line");
      }
      continue;
    }
    migrations.back().sql.append(line).append("\n");
  }
  return migrations;
}

}  // namespace amptune::store
