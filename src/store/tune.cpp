// Store: the searches of amptune tune (migration 16): searches, rounds, candidates; the advice of
// a diagnosis. Writes of rows that exist already leave them (INSERT OR IGNORE): several
// processes running one search write the same rows.
#include <optional>
#include <string>
#include <vector>

#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::Statement;

namespace {

const char* const kSearchColumns =
    "t.id, t.sweep_id, t.block_json, t.metric, t.higher_is_better, t.reference_run_id, "
    "t.start_run_id, t.status, coalesce(t.answer_run_id, 0), t.answer_yaml, t.answer_value, "
    "t.reference_value, coalesce(t.epochs_spent, 0), coalesce(t.grid_epochs, 0), t.note, "
    "t.created_at, coalesce(t.finished_at, ''), s.name";

using detail::kMaxEpoch;
using detail::kMaxInt;

// An INTEGER column of `row` (a row of `table` whose id or rowid is `id`) in [min, max].
int int_of(const std::string& path, const Statement& row, int column, const detail::Cell& cell,
           int64_t min, int64_t max) {
  return static_cast<int>(detail::int_column(path, row, column, cell, min, max));
}

// A tune_searches row of `path` (kSearchColumns), its numbers and JSON checked as they are read.
records::TuneSearchRow search_row(const std::string& path, const Statement& row) {
  records::TuneSearchRow t;
  t.id = row.column_int(0);
  auto cell = [&](const char* column) { return detail::Cell{"tune_searches", t.id, column}; };
  t.sweep_id = row.column_int(1);
  t.block_json = row.column_text(2);
  detail::json_object_column(path, cell("block_json"), t.block_json);
  t.metric = row.column_text(3);
  t.higher_is_better = int_of(path, row, 4, cell("higher_is_better"), 0, 1) != 0;
  t.reference_run_id = row.column_int(5);
  t.start_run_id = row.column_int(6);
  t.status = detail::word_column(path, cell("status"), row.column_text(7), records::parse_tune_status);
  t.answer_run_id = row.column_int(8);
  t.answer_yaml = row.column_text(9);
  t.answer_value = detail::real_column(path, row, 10, cell("answer_value"));
  t.reference_value = detail::real_column(path, row, 11, cell("reference_value"));
  t.epochs_spent = int_of(path, row, 12, cell("epochs_spent"), 0, kMaxInt);
  t.grid_epochs = int_of(path, row, 13, cell("grid_epochs"), 0, kMaxInt);
  t.note = row.column_text(14);
  t.created_at = row.column_text(15);
  t.finished_at = row.column_text(16);
  t.sweep_name = row.column_text(17);
  return t;
}

// A tune_rounds row of `path` (search_id, round, kind, start_run_id, fork_epoch,
// diagnosis_epoch, note, rowid), checked as it is read.
records::TuneRoundRow round_row(const std::string& path, const Statement& row) {
  auto cell = [&](const char* column) {
    return detail::Cell{"tune_rounds", row.column_int(7), column};
  };
  records::TuneRoundRow r;
  r.search_id = row.column_int(0);
  r.round = int_of(path, row, 1, cell("round"), 0, kMaxInt);
  r.kind = detail::word_column(path, cell("kind"), row.column_text(2), records::parse_round_kind);
  r.start_run_id = row.column_int(3);
  r.fork_epoch = int_of(path, row, 4, cell("fork_epoch"), -1, kMaxEpoch);
  if (!row.is_null(5))
    r.diagnosis_epoch = int_of(path, row, 5, cell("diagnosis_epoch"), -1, kMaxEpoch);
  r.note = row.column_text(6);
  return r;
}

// A tune_candidates row of `path` (the columns of Store::tune_candidates, rowid last), checked
// as it is read: change_json a JSON object, the numbers in range.
records::TuneCandidateRow candidate_row(const std::string& path, const Statement& row) {
  auto cell = [&](const char* column) {
    return detail::Cell{"tune_candidates", row.column_int(15), column};
  };
  records::TuneCandidateRow c;
  c.search_id = row.column_int(0);
  c.round = int_of(path, row, 1, cell("round"), 0, kMaxInt);
  c.seq = int_of(path, row, 2, cell("seq"), 0, kMaxInt);
  c.move = detail::word_column(path, cell("move"), row.column_text(3), parse_tune_move_kind);
  c.change_json = row.column_text(4);
  detail::json_object_column(path, cell("change_json"), c.change_json);
  c.reason = row.column_text(5);
  if (!row.column_text(6).empty()) {  // NULL (read as ''): the move came from the order
    c.advice_rule = detail::word_column(path, cell("advice_rule"), row.column_text(6),
                                        records::parse_advice_rule);
  }
  c.advice_module = row.column_text(7);
  c.run_id = row.column_int(8);
  c.parent_run_id = row.column_int(9);
  c.fork_epoch = int_of(path, row, 10, cell("fork_epoch"), -1, kMaxEpoch);
  c.rung = int_of(path, row, 11, cell("rung"), -1, kMaxInt);  // -1: NULL, no rung yet
  c.value = detail::real_column(path, row, 12, cell("value"));
  c.reference_value = detail::real_column(path, row, 13, cell("reference_value"));
  c.outcome = detail::word_column(path, cell("outcome"), row.column_text(14), records::parse_outcome);
  return c;
}

}  // namespace

records::TuneSearchRow Store::ensure_tune_search(const records::TuneSearchRow& row) {
  const std::string action = "recording a tune search of sweep " + std::to_string(row.sweep_id);
  return detail::guarded_write(path_, db_, action, [&] {
    sql::run(db_,
             "INSERT OR IGNORE INTO tune_searches (sweep_id, block_json, metric, "
             "higher_is_better, reference_run_id, start_run_id, created_at) "
             "VALUES (?, ?, ?, ?, ?, ?, ?)",
             row.sweep_id, row.block_json, row.metric, int64_t{row.higher_is_better},
             row.reference_run_id, row.start_run_id, detail::now_utc());
    Statement select(db_,
                     std::string("SELECT ") + kSearchColumns +
                         " FROM tune_searches t JOIN sweeps s ON s.id = t.sweep_id "
                         "WHERE t.sweep_id = ? AND t.block_json = ?",
                     row.sweep_id, row.block_json);
    select.step();
    return search_row(path_, select);
  });
}

std::vector<records::TuneSearchRow> Store::tune_searches(const std::string& sweep) const {
  return detail::guarded(path_, "reading the tune searches of sweep " + sweep, [&] {
    Statement select(db_,
                     std::string("SELECT ") + kSearchColumns +
                         " FROM tune_searches t JOIN sweeps s ON s.id = t.sweep_id "
                         "WHERE s.name = ? ORDER BY t.id",
                     sweep);
    return sql::read_rows(select, [&](const Statement& row) { return search_row(path_, row); });
  });
}

void Store::finish_tune_search(const records::TuneSearchRow& row) {
  const std::string action = "recording the end of tune search " + std::to_string(row.id);
  detail::guarded_write(path_, db_, action, [&] {
    sql::run(db_,
             "UPDATE tune_searches SET status = ?, answer_run_id = NULLIF(?, 0), "
             "answer_yaml = ?, answer_value = ?, reference_value = ?, epochs_spent = ?, "
             "grid_epochs = ?, note = ?, finished_at = ? WHERE id = ?",
             to_string(row.status), row.answer_run_id, row.answer_yaml, row.answer_value,
             row.reference_value, int64_t{row.epochs_spent}, int64_t{row.grid_epochs}, row.note,
             detail::now_utc(), row.id);
  });
}

void Store::record_tune_round(const records::TuneRoundRow& r) {
  const std::string action = "recording round " + std::to_string(r.round) + " of tune search " +
                             std::to_string(r.search_id);
  detail::guarded_write(path_, db_, action, [&] {
    sql::run(db_,
             "INSERT OR IGNORE INTO tune_rounds (search_id, round, kind, start_run_id, "
             "fork_epoch, diagnosis_epoch, note) VALUES (?, ?, ?, ?, ?, NULLIF(?, -2), ?)",
             r.search_id, int64_t{r.round}, to_string(r.kind), r.start_run_id,
             int64_t{r.fork_epoch}, int64_t{r.diagnosis_epoch.value_or(-2)}, r.note);
  });
}

void Store::record_tune_candidate(const records::TuneCandidateRow& c) {
  const std::string action = "recording candidate " + std::to_string(c.seq) + " of round " +
                             std::to_string(c.round) + " of tune search " +
                             std::to_string(c.search_id);
  detail::guarded_write(path_, db_, action, [&] {
    detail::require_run(db_, path_, c.run_id, action);
    sql::run(db_,
             "INSERT OR IGNORE INTO tune_candidates (search_id, round, seq, move, change_json, "
             "reason, advice_rule, advice_module, run_id, parent_run_id, fork_epoch, rung, "
             "value, reference_value, outcome) VALUES (?, ?, ?, ?, ?, ?, NULLIF(?, ''), "
             "NULLIF(?, ''), ?, NULLIF(?, 0), ?, NULLIF(?, -1), ?, ?, ?)",
             c.search_id, int64_t{c.round}, int64_t{c.seq}, to_string(c.move.value()),
             c.change_json, c.reason,
             c.advice_rule ? records::to_string(*c.advice_rule) : std::string(), c.advice_module,
             c.run_id, c.parent_run_id, int64_t{c.fork_epoch}, int64_t{c.rung}, c.value,
             c.reference_value, to_string(c.outcome));
  });
}

void Store::update_tune_candidate(const records::TuneCandidateRow& c) {
  const std::string action = "recording the outcome of candidate " + std::to_string(c.seq) +
                             " of round " + std::to_string(c.round) + " of tune search " +
                             std::to_string(c.search_id);
  detail::guarded_write(path_, db_, action, [&] {
    sql::run(db_,
             "UPDATE tune_candidates SET rung = NULLIF(?, -1), value = ?, reference_value = ?, "
             "outcome = ? WHERE search_id = ? AND round = ? AND seq = ?",
             int64_t{c.rung}, c.value, c.reference_value, to_string(c.outcome), c.search_id,
             int64_t{c.round}, int64_t{c.seq});
  });
}

std::vector<records::TuneRoundRow> Store::tune_rounds(int64_t search_id) const {
  return detail::guarded(
      path_, "reading the rounds of tune search " + std::to_string(search_id), [&] {
        Statement select(db_,
                         "SELECT search_id, round, kind, start_run_id, fork_epoch, "
                         "diagnosis_epoch, note, rowid FROM tune_rounds WHERE search_id = ? "
                         "ORDER BY round",
                         search_id);
        return sql::read_rows(select, [&](const Statement& row) { return round_row(path_, row); });
      });
}

std::vector<records::TuneCandidateRow> Store::tune_candidates(int64_t search_id) const {
  return detail::guarded(
      path_, "reading the candidates of tune search " + std::to_string(search_id), [&] {
        Statement select(db_,
                         "SELECT search_id, round, seq, move, change_json, reason, "
                         "coalesce(advice_rule, ''), coalesce(advice_module, ''), run_id, "
                         "coalesce(parent_run_id, 0), fork_epoch, coalesce(rung, -1), value, "
                         "reference_value, outcome, rowid FROM tune_candidates "
                         "WHERE search_id = ? ORDER BY round, seq",
                         search_id);
        return sql::read_rows(select,
                              [&](const Statement& row) { return candidate_row(path_, row); });
      });
}

std::optional<std::vector<records::DiagnosisAdvice>> Store::diagnosis_advice(int64_t run_id,
                                                                    int epoch) const {
  return detail::guarded(
      path_,
      "reading the diagnosis of epoch " + std::to_string(epoch) + " of run " +
          std::to_string(run_id),
      [&]() -> std::optional<std::vector<records::DiagnosisAdvice>> {
        if (!sql::exists(db_, "SELECT 1 FROM diagnoses WHERE run_id = ? AND epoch = ?", run_id,
                         int64_t{epoch})) {
          return std::nullopt;
        }
        Statement select(db_,
                         "SELECT rule, module, advice, rowid FROM diagnosis_advice WHERE "
                         "run_id = ? AND epoch = ? ORDER BY seq",
                         run_id, int64_t{epoch});
        return sql::read_rows(select, [&](const Statement& row) {
          const detail::Cell rule{"diagnosis_advice", row.column_int(3), "rule"};
          return records::DiagnosisAdvice{
              detail::word_column(path_, rule, row.column_text(0), records::parse_advice_rule),
              row.column_text(1), row.column_text(2)};
        });
      });
}

}  // namespace amptune::store
