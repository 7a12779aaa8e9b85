// Private to src/store: splits schemas/store.sql into its numbered migrations.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace amptune::store {

struct Migration {
  int version = 0;
  std::string sql;  // the statements of the section, comments included
};

// Sections start at lines "-- migration: N"; the text before the first one is a header and must
// hold only comments. Versions must count 1, 2, 3, ... Throws StoreError (naming the line) on a
// malformed file: that is a bug of the build, caught by the unit tests.
std::vector<Migration> parse_migrations(std::string_view text);

}  // namespace amptune::store
