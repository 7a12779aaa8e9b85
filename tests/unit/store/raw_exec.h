// SQL run on a database file through a raw connection of its own, for tests that build what the
// Store API does not write (an older schema, a crafted input).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

namespace amptune::store {

inline void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK) << path;
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message << " in " << sql;
}

}  // namespace amptune::store
