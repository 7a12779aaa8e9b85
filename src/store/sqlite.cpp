#include "store/sqlite.h"

#include <cmath>
#include <limits>
#include <utility>

#include "core/process.h"

namespace amptune::store::sql {

namespace {

std::string first_line(std::string_view sql) {
  size_t start = sql.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return "";
  sql.remove_prefix(start);
  std::string_view line = sql.substr(0, sql.find('\n'));
  if (line.size() > 80) return std::string(line.substr(0, 77)) + "...";
  return std::string(line);
}

// Why this thread's last statement was interrupted by on_progress (raise reads it).
enum class Interrupt { kNone, kSteps, kWorkBound };
thread_local Interrupt t_interrupt = Interrupt::kNone;
// The progress calls of the statement this thread is stepping (its Statement's count, kept
// over all its steps; sqlite3_stmt_status's VM_STEP is only added up when a step returns).
thread_local int64_t* t_progress = nullptr;

// SQLite calls it every kProgressPeriod steps of a statement, on the thread that steps it;
// non-zero interrupts the statement.
constexpr int kProgressPeriod = 10000;
int on_progress(void*) {
  if (work_bound_passed()) {
    t_interrupt = Interrupt::kWorkBound;
    return 1;
  }
  if (t_progress != nullptr && ++*t_progress > kMaxStatementSteps / kProgressPeriod) {
    t_interrupt = Interrupt::kSteps;
    return 1;
  }
  return 0;
}

// Counts the progress calls of one statement's step into `count` while it lives.
class Counting {
 public:
  explicit Counting(int64_t* count) : outer_(std::exchange(t_progress, count)) {}
  ~Counting() { t_progress = outer_; }
  Counting(const Counting&) = delete;
  Counting& operator=(const Counting&) = delete;

 private:
  int64_t* outer_;
};

}  // namespace

void bound_work(sqlite3* db) {
  sqlite3_progress_handler(db, kProgressPeriod, on_progress, nullptr);
}

void raise(sqlite3* db, int rc, std::string_view sql) {
  int code = db ? sqlite3_extended_errcode(db) : rc;
  if ((code & 0xff) != (rc & 0xff)) code = rc;  // the handle's code belongs to another call
  std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if (message.empty() || message == "not an error") message = sqlite3_errstr(rc);
  std::string where = first_line(sql);
  if ((rc & 0xff) == SQLITE_INTERRUPT) {
    const Interrupt why = std::exchange(t_interrupt, Interrupt::kNone);
    if (why == Interrupt::kWorkBound) check_work_bound();  // throws WorkAbandoned
    if (why == Interrupt::kSteps) {
      message = "the statement ran past " + std::to_string(kMaxStatementSteps) +
                " steps without ending: the database makes it run away (a view or values amptune "
                "never writes); check the database or leave it out";
    }
  }
  throw SqliteError(code, where.empty() ? message : message + " [in: " + where + "]");
}

void exec(sqlite3* db, std::string_view sql) {
  std::string text(sql);
  int64_t progress = 0;
  Counting counting(&progress);
  int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) raise(db, rc, sql);
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db), sql_(sql) {
  int rc = sqlite3_prepare_v2(db_, sql_.data(), static_cast<int>(sql_.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) raise(db_, rc, sql_);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) raise(db_, rc, sql_);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  if (std::isnan(value)) return bind_null(index);
  int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) raise(db_, rc, sql_);
  return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
  int rc = sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                             SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) raise(db_, rc, sql_);
  return *this;
}

Statement& Statement::bind_null(int index) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) raise(db_, rc, sql_);
  return *this;
}

Statement& Statement::bind_text_or_null(int index, const std::string& value) {
  return value.empty() ? bind_null(index) : bind(index, value);
}

Statement& Statement::bind_column(int index, const Statement& from, int column) {
  int rc = sqlite3_bind_value(stmt_, index, sqlite3_column_value(from.stmt_, column));
  if (rc != SQLITE_OK) raise(db_, rc, sql_);
  return *this;
}

Statement& Statement::reset() {
  progress_ = 0;
  sqlite3_reset(stmt_);  // returns the last step's error, which step() already reported
  sqlite3_clear_bindings(stmt_);
  return *this;
}

bool Statement::step() {
  int rc = 0;
  {
    Counting counting(&progress_);
    rc = sqlite3_step(stmt_);
  }
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  raise(db_, rc, sql_);
}

void Statement::run() {
  while (step()) {
  }
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }

std::string Statement::column_name(int column) const {
  const char* name = sqlite3_column_name(stmt_, column);
  return name ? name : "";
}

int Statement::column_type(int column) const { return sqlite3_column_type(stmt_, column); }

int64_t Statement::column_int(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::column_double(int column) const {
  if (is_null(column)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (!text) return "";
  const auto bytes = static_cast<size_t>(sqlite3_column_bytes(stmt_, column));
  if (bytes > kMaxTextBytes) {
    throw SqliteError(SQLITE_TOOBIG, "column " + column_name(column) + " holds a value of " +
                                         std::to_string(bytes) + " bytes, more than the " +
                                         std::to_string(kMaxTextBytes) +
                                         " amptune reads (amptune never writes that: the "
                                         "database was edited or crafted) [in: " +
                                         first_line(sql_) + "]");
  }
  return std::string(reinterpret_cast<const char*>(text), bytes);
}

}  // namespace amptune::store::sql
