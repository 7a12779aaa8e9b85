// Store: the searches of amptune tune (migration 16): searches, rounds, candidates; the advice of
// a diagnosis. Writes of rows that exist already leave them (INSERT OR IGNORE): several
// processes running one search write the same rows.
#include <optional>
#include <string>
#include <vector>

#include "store/columns.h"
#include "store/internal.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace amptune::store {

using sql::Statement;

namespace {

// The columns of a tune_searches row search_row reads (and its sweep's name).
const char* const kSearchColumns =
    "t.id, t.sweep_id, t.block_json, t.metric, t.higher_is_better, t.reference_run_id, "
    "t.start_run_id, t.status, coalesce(t.answer_run_id, 0) AS answer_run_id, t.answer_yaml, "
    "t.answer_value, t.reference_value, t.epochs_spent, t.grid_epochs, t.note, t.created_at, "
    "coalesce(t.finished_at, '') AS finished_at, s.name AS sweep_name";

// A tune_searches row (kSearchColumns), its numbers and JSON checked as they are read.
records::TuneSearchRow search_row(const detail::Row& row) {
  records::TuneSearchRow t;
  t.id = row.id();
  t.sweep_id = row.integer("sweep_id");
  t.block_json = row.text("block_json");
  row.value("block_json").require_json_object();
  t.metric = row.text("metric");
  t.higher_is_better = row.integer("higher_is_better") != 0;
  t.reference_run_id = row.integer("reference_run_id");
  t.start_run_id = row.integer("start_run_id");
  t.status = row.word("status", records::parse_tune_status);
  t.answer_run_id = row.integer("answer_run_id");
  t.answer_yaml = row.text("answer_yaml");
  t.answer_value = row.number("answer_value");
  t.reference_value = row.number("reference_value");
  t.epochs_spent = row.small("epochs_spent");  // NULL: 0
  t.grid_epochs = row.small("grid_epochs");
  t.note = row.text("note");
  t.created_at = row.text("created_at");
  t.finished_at = row.text("finished_at");
  t.sweep_name = row.text("sweep_name");
  return t;
}

std::vector<records::TuneSearchRow> search_rows(const std::string& path, Statement& select) {
  const detail::Row row(path, detail::table("tune_searches"), select, "id");
  return sql::read_rows(select, [&](const Statement&) { return search_row(row); });
}

// A tune_rounds row (Store::tune_rounds's columns, rowid AS row_id), checked as it is read.
records::TuneRoundRow round_row(const detail::Row& row) {
  records::TuneRoundRow r;
  r.search_id = row.integer("search_id");
  r.round = row.small("round");
  r.kind = row.word("kind", records::parse_round_kind);
  r.start_run_id = row.integer("start_run_id");
  r.fork_epoch = row.small("fork_epoch");
  if (!row.is_null("diagnosis_epoch")) r.diagnosis_epoch = row.small("diagnosis_epoch");
  r.note = row.text("note");
  return r;
}

// A tune_candidates row (Store::tune_candidates's columns, rowid AS row_id), checked as it is
// read: change_json a JSON object, the numbers in range.
records::TuneCandidateRow candidate_row(const detail::Row& row) {
  records::TuneCandidateRow c;
  c.search_id = row.integer("search_id");
  c.round = row.small("round");
  c.seq = row.small("seq");
  c.move = row.word("move", parse_tune_move_kind);
  c.change_json = row.text("change_json");
  row.value("change_json").require_json_object();
  c.reason = row.text("reason");
  if (!row.text("advice_rule").empty()) {  // NULL (read as ''): the move came from the order
    c.advice_rule = row.word("advice_rule", records::parse_advice_rule);
  }
  c.advice_module = row.text("advice_module");
  c.run_id = row.integer("run_id");
  c.parent_run_id = row.is_null("parent_run_id") ? 0 : row.integer("parent_run_id");
  c.fork_epoch = row.small("fork_epoch");
  c.rung = row.small("rung", -1);  // NULL: no rung yet
  c.value = row.number("value");
  c.reference_value = row.number("reference_value");
  c.outcome = row.word("outcome", records::parse_outcome);
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
    return search_rows(path_, select).at(0);
  });
}

std::vector<records::TuneSearchRow> Store::tune_searches(const std::string& sweep) const {
  return detail::guarded(path_, "reading the tune searches of sweep " + sweep, [&] {
    Statement select(db_,
                     std::string("SELECT ") + kSearchColumns +
                         " FROM tune_searches t JOIN sweeps s ON s.id = t.sweep_id "
                         "WHERE s.name = ? ORDER BY t.id",
                     sweep);
    return search_rows(path_, select);
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
                         "diagnosis_epoch, note, rowid AS row_id FROM tune_rounds "
                         "WHERE search_id = ? ORDER BY round",
                         search_id);
        const detail::Row row(path_, detail::table("tune_rounds"), select, "row_id");
        return sql::read_rows(select, [&](const Statement&) { return round_row(row); });
      });
}

std::vector<records::TuneCandidateRow> Store::tune_candidates(int64_t search_id) const {
  return detail::guarded(
      path_, "reading the candidates of tune search " + std::to_string(search_id), [&] {
        Statement select(db_,
                         "SELECT search_id, round, seq, move, change_json, reason, advice_rule, "
                         "advice_module, run_id, parent_run_id, fork_epoch, rung, value, "
                         "reference_value, outcome, rowid AS row_id FROM tune_candidates "
                         "WHERE search_id = ? ORDER BY round, seq",
                         search_id);
        const detail::Row row(path_, detail::table("tune_candidates"), select, "row_id");
        return sql::read_rows(select, [&](const Statement&) { return candidate_row(row); });
      });
}

void Store::record_tune_jobs(const std::vector<records::TuneJobRow>& jobs) {
  if (jobs.empty()) return;
  const std::string action = "recording Slurm job " + jobs.front().job_id + " of tune search " +
                             std::to_string(jobs.front().search_id);
  detail::guarded_write(path_, db_, action, [&] {
    Statement insert(db_,
                     "INSERT OR REPLACE INTO tune_jobs (search_id, run_id, epoch, attempt, "
                     "job_id, task, task_db, log_path, state, submitted_at, ended_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''))");
    for (const records::TuneJobRow& j : jobs) {
      detail::require_run(db_, path_, j.run_id, action);
      insert.reset();
      insert.bind_all(j.search_id, j.run_id, int64_t{j.epoch}, int64_t{j.attempt}, j.job_id,
                      int64_t{j.task}, j.task_db, j.log_path, j.state,
                      j.submitted_at.empty() ? detail::now_utc() : j.submitted_at, std::string());
      insert.run();
    }
  });
}

void Store::update_tune_job(const records::TuneJobRow& j) {
  const std::string action = "recording the state of Slurm job " + j.job_id + "_" +
                             std::to_string(j.task) + " of tune search " +
                             std::to_string(j.search_id);
  detail::guarded_write(path_, db_, action, [&] {
    sql::run(db_,
             "UPDATE tune_jobs SET state = ?, ended_at = CASE WHEN ? THEN coalesce(ended_at, ?) "
             "END WHERE search_id = ? AND run_id = ? AND epoch = ? AND attempt = ?",
             j.state, int64_t{!j.ended_at.empty()}, detail::now_utc(), j.search_id, j.run_id,
             int64_t{j.epoch}, int64_t{j.attempt});
  });
}

std::vector<records::TuneJobRow> Store::tune_jobs(int64_t search_id) const {
  return detail::guarded(
      path_, "reading the Slurm jobs of tune search " + std::to_string(search_id), [&] {
        Statement select(db_,
                         "SELECT search_id, run_id, epoch, attempt, job_id, task, task_db, "
                         "log_path, state, submitted_at, coalesce(ended_at, '') AS ended_at, "
                         "rowid AS row_id FROM tune_jobs WHERE search_id = ? "
                         "ORDER BY submitted_at, run_id, attempt",
                         search_id);
        const detail::Row row(path_, detail::table("tune_jobs"), select, "row_id");
        return sql::read_rows(select, [&](const Statement&) {
          records::TuneJobRow j;
          j.search_id = row.integer("search_id");
          j.run_id = row.integer("run_id");
          j.epoch = row.small("epoch");
          j.attempt = row.small("attempt");
          j.job_id = row.text("job_id");
          j.task = row.small("task");
          j.task_db = row.text("task_db");
          j.log_path = row.text("log_path");
          j.state = row.text("state");
          j.submitted_at = row.text("submitted_at");
          j.ended_at = row.text("ended_at");
          return j;
        });
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
