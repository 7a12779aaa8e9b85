// Private to src/store: the columns of every table, described once. schemas/store.sql stays the
// source of the SQL (its migrations create the tables); this is what the code knows of each
// column: its declared type, whether it may be NULL, whether its readers take its values as that
// type (merge refuses an input whose value there is of another type) and the range of an INTEGER
// the readers take (merge refuses an input outside it). The readers read a row by column name
// through these (Row), merge checks its inputs by them (merge_check.cpp), and
// StoreColumns.DescribeEveryTableOfAFreshDatabase keeps them in step with PRAGMA table_info of a
// freshly migrated database (schema_differences). A new migration's columns go in both.
//
//   Statement select(db, "SELECT epoch, lr, rowid AS row_id FROM epochs WHERE run_id = ?", id);
//   const Row row(path, table("epochs"), select, "row_id");  // the statement's columns, once
//   while (select.step()) epochs.push_back({row.small("epoch"), row.number("lr")});
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "records/records.h"
#include "store/internal.h"
#include "store/sqlite.h"

namespace amptune::store::detail {

class Value;

// The type a column is declared with in schemas/store.sql (kNone: no type, e.g. runs.loss_scale,
// which holds a number or "dynamic").
enum class ColumnType { kInteger, kReal, kText, kJson, kNone };
// The word SQLite's table_info gives for it: "INTEGER", "REAL", "TEXT", "JSON", "".
const char* declared_type(ColumnType type);

constexpr int64_t kMinInt64 = std::numeric_limits<int64_t>::min();

struct Column {
  const char* name;
  ColumnType type;
  bool not_null;
  // The readers take its values as `type` (an INTEGER; REAL: a number, INTEGER or REAL; TEXT):
  // merge refuses another type (a TEXT in an INTEGER column passes SQLite's CHECKs: 'abc' >= 0).
  bool typed = false;
  // An INTEGER the readers take lies in [min, max] (kMaxInt, kMaxEpoch: what a C++ int holds):
  // a value outside is bad_value for a reader and refused by merge.
  int64_t min = kMinInt64;
  int64_t max = kMaxInt64;
  // A setting column of runs (RunSpec::columns: model, lr, opt_level, ...), read back as JSON text.
  bool setting = false;
  // Of runs: the member of the RunRow read_run fills from it (the other tables' readers read
  // their rows by name, Row).
  void (*fill)(const Value& value, records::RunRow& run) = nullptr;

  bool has_range() const { return min != kMinInt64 || max != kMaxInt64; }
  // The typeof() words a typed value may have: "'integer'", "'real', 'integer', 'null'", ...
  std::string sqlite_types() const;
};

struct Table {
  const char* name;
  std::vector<Column> columns;
  // Merge reads (and copies) it; an input's copy must be an ordinary table.
  bool merged = false;

  // The column named `name` (same_name), nullptr when the table has none.
  const Column* find(std::string_view name) const;
};

// Every table of the latest schema, schema_version first, in the migrations' order.
const std::vector<Table>& tables();
// The table named `name`; throws std::logic_error for a name no descriptor has (a bug).
const Table& table(std::string_view name);

// Where the tables `described` and those of the database `db` differ: a table or a column one
// has and the other lacks, a column's declared type or NOT NULL; one line each, none when
// they agree.
std::vector<std::string> schema_differences(sqlite3* db, const std::vector<Table>& described);

// A statement's row read by column name, each value checked against its table's descriptor as
// the readers take it; a bad one is bad_value naming the file, the table, the row (the value of
// the statement's column `id_column`) and the column. Column names are the statement's (an
// expression needs `AS name`); a column of the statement that the table lacks (a join's, a
// count) reads unchecked but for its own range.
class Row {
 public:
  friend class Value;
  Row(const std::string& path, const Table& table, const sql::Statement& statement,
      std::string_view id_column);

  const sql::Statement& statement() const { return statement_; }
  const std::string& path() const { return path_; }
  int size() const { return static_cast<int>(names_.size()); }  // the statement's columns
  // The statement's column `name`: its index, -1 when it has none.
  int index(std::string_view name) const;
  // The row's id (its id_column) and the Cell of its column `name`, for messages.
  int64_t id() const;
  Cell cell(std::string_view name) const;

  // The value of column `name` (std::logic_error when the statement has none: a bug), and its
  // readings as Value gives them.
  Value value(std::string_view name) const;
  Value value(int index) const;
  bool is_null(std::string_view name) const;
  int64_t integer(std::string_view name, int64_t min = kMinInt64, int64_t max = kMaxInt64) const;
  int small(std::string_view name, int if_null = 0) const;
  double number(std::string_view name) const;
  std::string text(std::string_view name) const;
  template <class Parse>
  auto word(std::string_view name, Parse parse) const;

 private:
  int at(std::string_view name) const;  // index(), std::logic_error when missing (a bug)

  const std::string& path_;
  const Table& table_;
  const sql::Statement& statement_;
  std::vector<std::string> names_;    // the statement's columns
  std::vector<const Column*> specs_;  // their descriptors (nullptr: not the table's)
  int id_at_;
};

// One value of a Row: its statement column, read and checked against its descriptor.
class Value {
 public:
  Value(const Row& row, int index) : row_(row), at_(index) {}

  const std::string& path() const { return row_.path_; }
  const sql::Statement& statement() const { return row_.statement_; }
  int index() const { return at_; }
  const std::string& name() const { return row_.names_[at_]; }
  const Column* column() const { return row_.specs_[at_]; }  // nullptr: not the table's
  Cell cell() const { return {row_.table_.name, row_.id(), name()}; }
  bool is_null() const { return row_.statement_.is_null(at_); }
  // An INTEGER in the column's range (or [min, max] for a column the table lacks).
  int64_t integer(int64_t min = kMinInt64, int64_t max = kMaxInt64) const;
  // integer() as an int (the column's range must fit one); `if_null` for NULL.
  int small(int if_null = 0) const;
  // The integer as SQLite converts it (NULL: 0): an unchecked column (claim_pid).
  int64_t raw_integer() const { return row_.statement_.column_int(at_); }
  // A number (REAL or INTEGER); NULL reads as NaN; else bad_value.
  double number() const;
  // The text ("" for NULL), as SQLite gives it.
  std::string text() const { return row_.statement_.column_text(at_); }
  // A word of `parse` (records/records.h parse_*), bad_value for another (word_column).
  template <class Parse>
  auto word(Parse parse) const {
    return word_column(row_.path_, cell(), text(), parse);
  }
  // The text, bad_value unless it is a JSON object (json_object_column).
  void require_json_object() const;

 private:
  const Row& row_;
  int at_;
};

template <class Parse>
auto Row::word(std::string_view name, Parse parse) const {
  return value(name).word(parse);
}

}  // namespace amptune::store::detail
