// The tables' column descriptors (columns.h), in schemas/store.sql's column order, and the row
// reader over them.
#include "store/columns.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace amptune::store::detail {
namespace {

constexpr ColumnType kInteger = ColumnType::kInteger;
constexpr ColumnType kReal = ColumnType::kReal;
constexpr ColumnType kText = ColumnType::kText;
constexpr bool kNotNull = true;
constexpr bool kNull = false;
constexpr bool kTyped = true;
constexpr bool kAnyType = false;
constexpr int64_t kAny = kMinInt64;

using records::RunRow;
using Fill = void (*)(const Value& value, RunRow& run);

// A column of runs and the member of RunRow read_run fills from it.
constexpr Column filled(Column column, Fill fill) {
  column.fill = fill;
  return column;
}

// A text column of runs into a member of RunRow (or of its provenance or work).
template <std::string RunRow::*member>
void text_of(const Value& v, RunRow& run) {
  run.*member = v.text();
}
template <std::string records::Provenance::*member>
void provenance_of(const Value& v, RunRow& run) {
  run.provenance.*member = v.text();
}
template <std::string records::RunWork::*member>
void work_of(const Value& v, RunRow& run) {
  run.work.*member = v.text();
}
// A figure of RunWork: NULL (not known) reads as 0.
template <double records::RunWork::*member>
void figure_of(const Value& v, RunRow& run) {
  const double value = v.number();
  run.work.*member = std::isnan(value) ? 0.0 : value;
}

void status_of(const Value& v, RunRow& run) {
  const std::string text = v.text();
  try {
    run.status = records::parse_status(text);
  } catch (const StoreError&) {
    bad_value(v.path(), v.cell(),
              "holds '" + log::clipped(text, 40) +
                  "', not a run status (pending, running, done, failed, diverged or pruned)");
  }
}

// A setting column (RunSpec::columns) back as JSON text, as its declared type says: a JSON
// column's text as it is, numbers as numbers, other text as a JSON string.
void setting_of(const Value& v, RunRow& run) {
  const std::string name = v.column()->name;
  if (name == "primary_metric") run.primary_metric = v.text();
  if (v.is_null()) return;
  const sql::Statement& row = v.statement();
  switch (row.column_type(v.index())) {
    case SQLITE_INTEGER:
      run.columns[name] = std::to_string(v.raw_integer());
      break;
    case SQLITE_FLOAT:
      run.columns[name] = nlohmann::json(row.column_double(v.index())).dump();
      break;
    case SQLITE_TEXT:
      run.columns[name] =
          v.column()->type == ColumnType::kJson ? v.text() : nlohmann::json(v.text()).dump();
      break;
    default:  // a BLOB: not written by amptune
      run.columns[name] = nlohmann::json(v.text()).dump();
  }
}

constexpr Column setting(const char* name, ColumnType type, bool not_null = kNull) {
  return {name, type, not_null, kAnyType, kAny, kMaxInt64, /*setting=*/true, setting_of};
}
// A number (REAL) the readers take as one: NULL is a NaN stored.
constexpr Column number(const char* name, bool not_null = kNull) {
  return {name, kReal, not_null, kTyped};
}
// An optional text column of runs.
constexpr Column text(const char* name, Fill fill) { return filled({name, kText, kNull}, fill); }

constexpr Column kRunColumns[] = {
    {"id", kInteger, kNull, kTyped},  // read_run's (Row::id)
    filled({"sweep_id", kInteger, kNotNull, kTyped},
           [](const Value& v, RunRow& r) { r.sweep_id = v.integer(); }),
    filled({"name", kText, kNotNull, kTyped}, text_of<&RunRow::name>),
    filled({"cell_index", kInteger, kNotNull, kTyped, 0, kMaxInt},
           [](const Value& v, RunRow& r) { r.cell_index = v.small(); }),
    filled({"label", kText, kNotNull}, text_of<&RunRow::label>),
    filled({"status", kText, kNotNull, kTyped}, status_of),
    filled({"config_json", kText, kNotNull, kTyped}, text_of<&RunRow::config_json>),
    filled({"config_hash", kText, kNotNull, kTyped}, text_of<&RunRow::config_hash>),
    filled({"axes_json", kText, kNotNull}, text_of<&RunRow::axes_json>),
    filled({"message", kText, kNotNull}, text_of<&RunRow::message>),
    text("summary_json", text_of<&RunRow::summary_json>),
    text("started_at", text_of<&RunRow::started_at>),
    text("finished_at", text_of<&RunRow::finished_at>),
    text("heartbeat_at", text_of<&RunRow::heartbeat_at>),
    filled({"created_at", kText, kNotNull}, text_of<&RunRow::created_at>),
    text("amptune_version", provenance_of<&records::Provenance::amptune_version>),
    text("git_commit", provenance_of<&records::Provenance::git_commit>),
    filled({"git_dirty", kInteger, kNull, kTyped, 0, 1},
           [](const Value& v, RunRow& r) { r.provenance.git_dirty = v.raw_integer() != 0; }),
    text("torch_version", provenance_of<&records::Provenance::torch_version>),
    text("host", provenance_of<&records::Provenance::host>),
    filled({"threads", kInteger, kNull, kTyped, 0, kMaxInt},
           [](const Value& v, RunRow& r) { r.provenance.threads = v.small(r.provenance.threads); }),
    text("device", provenance_of<&records::Provenance::device>),
    text("command_line", provenance_of<&records::Provenance::command_line>),
    setting("model", kText),
    setting("dataset", kText),
    setting("optimizer", kText),
    setting("lr", kReal),
    setting("batch_size", kInteger),
    setting("epochs", kInteger),
    setting("lr_dec_epoch", ColumnType::kJson),
    setting("seed", kInteger),
    setting("primary_metric", kText, kNotNull),  // migration 2
    setting("opt_level", kText),                 // migration 3
    setting("dtype", kText),
    setting("loss_scale", ColumnType::kNone),  // a number or "dynamic"
    setting("backend", kText),
    // Migration 4, forks: read_run makes run.fork when parent_run_id is set.
    filled({"parent_run_id", kInteger, kNull, kTyped},
           [](const Value& v, RunRow& r) {
             if (r.fork) r.fork->parent_run_id = v.raw_integer();
           }),
    filled({"parent_epoch", kInteger, kNull, kTyped, 0, kMaxEpoch},
           [](const Value& v, RunRow& r) {
             if (r.fork) r.fork->parent_epoch = v.small();
           }),
    text("fork_overrides",
         [](const Value& v, RunRow& r) {
           if (r.fork) r.fork->overrides_json = v.text();
         }),
    text("fork_changes",
         [](const Value& v, RunRow& r) {
           if (r.fork) r.fork->changes = v.text();
         }),
    filled({"reset_optimizer", kInteger, kNull, kTyped, 0, 1},
           [](const Value& v, RunRow& r) {
             if (r.fork) r.fork->reset_optimizer = v.raw_integer() != 0;
           }),
    // Migration 6, the holder: read_run makes run.holder when claim_pid is set.
    text("claim_machine",
         [](const Value& v, RunRow& r) {
           if (r.holder) r.holder->machine = v.text();
         }),
    filled({"claim_pid", kInteger, kNull},
           [](const Value& v, RunRow& r) {
             if (r.holder) r.holder->pid = v.raw_integer();
           }),
    filled({"claim_pid_start", kInteger, kNull},
           [](const Value& v, RunRow& r) {
             if (r.holder) r.holder->start_ticks = v.raw_integer();
           }),
    filled({"world_size", kInteger, kNull, kTyped, 0, kMaxInt},  // migration 7
           [](const Value& v, RunRow& r) {
             r.provenance.world_size = v.small(r.provenance.world_size);
           }),
    filled({"global_batch", kInteger, kNull, kTyped, 0, kMaxInt64},
           [](const Value& v, RunRow& r) {
             if (!v.is_null()) r.provenance.global_batch = v.integer();
           }),
    setting("backend_reason", kText),                                   // migration 10
    text("allocator", provenance_of<&records::Provenance::allocator>),  // migration 11
    text("data_fingerprint", text_of<&RunRow::data_fingerprint>),       // migration 12
    text("legacy_config_hash", text_of<&RunRow::legacy_config_hash>),
    filled(number("train_flops_per_sample"),  // migration 19
           figure_of<&records::RunWork::train_flops_per_sample>),
    filled(number("peak_flops"), figure_of<&records::RunWork::peak_flops>),
    text("peak_precision", work_of<&records::RunWork::peak_precision>),
    text("peak_source", work_of<&records::RunWork::peak_source>),
    text("blas", provenance_of<&records::Provenance::blas>),  // migration 20
    text("uncounted_ops", work_of<&records::RunWork::uncounted_ops>),
};

constexpr Column kEpochColumns[] = {
    {"run_id", kInteger, kNotNull, kTyped},
    {"epoch", kInteger, kNotNull, kTyped, 0, kMaxEpoch},
    {"global_step", kInteger, kNotNull, kTyped, 0, kMaxInt64},
    number("lr"),
    number("train_loss"),
    number("train_fps_mean"),
    number("train_fps_min"),
    number("train_fps_max"),
    number("epoch_seconds"),
    {"skipped_samples", kInteger, kNotNull, kTyped, 0, kMaxInt64},
    {"checkpoint_path", kText, kNull, kTyped},
    {"checkpoint_bytes", kInteger, kNull, kTyped, 0, kMaxInt64},
    {"checkpoint_sha256", kText, kNull, kTyped},
    {"checkpoint_deleted_at", kText, kNull},
    {"recorded_at", kText, kNotNull},
    number("data_wait_seconds"),  // migration 10: EpochTimes
    number("forward_seconds"),
    number("backward_seconds"),
    number("optimizer_seconds"),
    number("eval_seconds"),
    number("checkpoint_seconds"),
    number("db_seconds"),
    number("startup_seconds"),
    {"profile_trace", kText, kNull},
};

constexpr Column kDiagnosticColumns[] = {
    {"run_id", kInteger, kNotNull},
    {"epoch", kInteger, kNotNull, kTyped, -1, kMaxEpoch},
    {"kind", kText, kNotNull},
    {"batch", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"seq", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"module", kText, kNotNull},
    {"dtype", kText, kNotNull},
    {"numel", kInteger, kNotNull, kTyped, 0, kMaxInt64},
    number("cosine"),
    number("max_abs_err"),
    number("max_rel_err"),
    number("frac_rel_err_1e3"),
    number("frac_rel_err_5e3"),
    number("overflow_frac"),
    number("underflow_frac"),
    number("input_nonfinite_frac"),  // migration 17
};

constexpr Column kFp8DiagnosticColumns[] = {  // migration 22
    {"run_id", kInteger, kNotNull},
    {"epoch", kInteger, kNotNull, kTyped, -1, kMaxEpoch},
    {"batch", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"seq", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"module", kText, kNotNull, kTyped},
    {"role", kText, kNotNull, kTyped},
    {"format", kText, kNotNull, kTyped},
    {"numel", kInteger, kNotNull, kTyped, 0, kMaxInt64},
    number("saturated_frac"),
    number("flushed_frac"),
    number("sqnr_db"),
    number("amax"),
    number("scale"),
    number("history_min"),
    number("history_max"),
    {"history_len", kInteger, kNotNull, kTyped, 0, kMaxInt64},
};

constexpr Column kSchemaVersionColumns[] = {{"version", kInteger, kNotNull},
                                            {"applied_at", kText, kNotNull}};

constexpr Column kSweepColumns[] = {
    {"id", kInteger, kNull, kTyped},  {"name", kText, kNotNull, kTyped},
    {"description", kText, kNotNull}, {"yaml", kText, kNotNull},
    {"source_path", kText, kNotNull}, {"created_at", kText, kNotNull},
    {"updated_at", kText, kNotNull}};

constexpr Column kRunParamColumns[] = {{"run_id", kInteger, kNotNull, kTyped},
                                       {"key", kText, kNotNull},
                                       {"value_json", kText, kNotNull}};

constexpr Column kMetricColumns[] = {{"run_id", kInteger, kNotNull, kTyped},
                                     {"epoch", kInteger, kNotNull, kTyped, 0, kMaxEpoch},
                                     {"name", kText, kNotNull, kTyped},
                                     number("value")};

constexpr Column kMetricInfoColumns[] = {  // migration 2
    {"name", kText, kNull},
    {"higher_is_better", kInteger, kNotNull, kTyped, 0, 1},
    {"description", kText, kNotNull}};

constexpr Column kLossScaleEventColumns[] = {  // migration 3
    {"run_id", kInteger, kNotNull, kTyped},
    {"epoch", kInteger, kNotNull, kTyped, 0, kMaxEpoch},
    {"global_step", kInteger, kNotNull, kTyped, 0, kMaxInt64},
    number("scale", kNotNull),
    {"reason", kText, kNotNull}};

constexpr Column kDiagnosisColumns[] = {  // migration 8
    {"run_id", kInteger, kNotNull, kTyped},
    {"epoch", kInteger, kNotNull, kTyped, -1, kMaxEpoch},
    {"against", kText, kNotNull},
    {"batches", kInteger, kNotNull, kTyped, 1, kMaxInt},
    number("cosine_min", kNotNull),
    number("loss_scale"),
    number("seconds"),
    {"recorded_at", kText, kNotNull}};

constexpr Column kDiagnosisAdviceColumns[] = {{"run_id", kInteger, kNotNull},
                                              {"epoch", kInteger, kNotNull, kTyped, -1, kMaxEpoch},
                                              {"seq", kInteger, kNotNull, kTyped, 0, kMaxInt},
                                              {"rule", kText, kNotNull},
                                              {"module", kText, kNotNull},
                                              {"advice", kText, kNotNull}};

constexpr Column kInitialMetricColumns[] = {  // migration 9
    {"run_id", kInteger, kNotNull, kTyped},
    {"name", kText, kNotNull},
    number("value")};

constexpr Column kDatabaseIdentityColumns[] = {{"id", kText, kNotNull}};  // migration 14

constexpr Column kPruneDecisionColumns[] = {  // migration 15
    {"id", kInteger, kNull},
    {"run_id", kInteger, kNotNull, kTyped},
    {"epoch", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"action", kText, kNotNull},
    {"rule", kText, kNotNull},
    {"metric", kText, kNotNull},
    {"rung", kInteger, kNull, kTyped, 0, kMaxInt},
    number("value"),
    number("threshold"),
    {"compared_json", kText, kNotNull, kTyped},
    {"reason", kText, kNotNull},
    {"decided_at", kText, kNotNull}};

constexpr Column kTuneSearchColumns[] = {  // migration 16
    {"id", kInteger, kNull},
    {"sweep_id", kInteger, kNotNull},
    {"block_json", kText, kNotNull},
    {"metric", kText, kNotNull},
    {"higher_is_better", kInteger, kNotNull, kTyped, 0, 1},
    {"reference_run_id", kInteger, kNotNull},
    {"start_run_id", kInteger, kNotNull},
    {"status", kText, kNotNull},
    {"answer_run_id", kInteger, kNull},
    {"answer_yaml", kText, kNotNull},
    number("answer_value"),
    number("reference_value"),
    {"epochs_spent", kInteger, kNull, kTyped, 0, kMaxInt},
    {"grid_epochs", kInteger, kNull, kTyped, 0, kMaxInt},
    {"note", kText, kNotNull},
    {"created_at", kText, kNotNull},
    {"finished_at", kText, kNull}};

constexpr Column kTuneRoundColumns[] = {{"search_id", kInteger, kNotNull},
                                        {"round", kInteger, kNotNull, kTyped, 0, kMaxInt},
                                        {"kind", kText, kNotNull},
                                        {"start_run_id", kInteger, kNotNull},
                                        {"fork_epoch", kInteger, kNotNull, kTyped, -1, kMaxEpoch},
                                        {"diagnosis_epoch", kInteger, kNull, kTyped, -1, kMaxEpoch},
                                        {"note", kText, kNotNull}};

constexpr Column kTuneCandidateColumns[] = {
    {"search_id", kInteger, kNotNull},
    {"round", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"seq", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"move", kText, kNotNull},
    {"change_json", kText, kNotNull},
    {"reason", kText, kNotNull},
    {"advice_rule", kText, kNull},
    {"advice_module", kText, kNull},
    {"run_id", kInteger, kNotNull},
    {"parent_run_id", kInteger, kNull},
    {"fork_epoch", kInteger, kNotNull, kTyped, -1, kMaxEpoch},
    {"rung", kInteger, kNull, kTyped, 0, kMaxInt},
    number("value"),
    number("reference_value"),
    {"outcome", kText, kNotNull}};

constexpr Column kTuneJobColumns[] = {  // migration 21
    {"search_id", kInteger, kNotNull},
    {"run_id", kInteger, kNotNull},
    {"epoch", kInteger, kNotNull, kTyped, 0, kMaxEpoch},
    {"attempt", kInteger, kNotNull, kTyped, 1, kMaxInt},
    {"job_id", kText, kNotNull},
    {"task", kInteger, kNotNull, kTyped, 0, kMaxInt},
    {"task_db", kText, kNotNull},
    {"log_path", kText, kNotNull},
    {"state", kText, kNotNull},
    {"submitted_at", kText, kNotNull},
    {"ended_at", kText, kNull}};

template <size_t N>
Table table_of(const char* name, const Column (&columns)[N], bool merged = false) {
  return {name, std::vector<Column>(columns, columns + N), merged};
}

std::vector<Table> described_tables() {
  constexpr bool kMerged = true;
  return {table_of("schema_version", kSchemaVersionColumns, kMerged),
          table_of("sweeps", kSweepColumns, kMerged),
          table_of("runs", kRunColumns, kMerged),
          table_of("run_params", kRunParamColumns, kMerged),
          table_of("epochs", kEpochColumns, kMerged),
          table_of("metrics", kMetricColumns, kMerged),
          table_of("metric_info", kMetricInfoColumns, kMerged),
          table_of("loss_scale_events", kLossScaleEventColumns, kMerged),
          table_of("diagnoses", kDiagnosisColumns, kMerged),
          table_of("diagnostics", kDiagnosticColumns, kMerged),
          table_of("diagnosis_advice", kDiagnosisAdviceColumns, kMerged),
          table_of("fp8_diagnostics", kFp8DiagnosticColumns, kMerged),
          table_of("initial_metrics", kInitialMetricColumns, kMerged),
          table_of("database_identity", kDatabaseIdentityColumns),
          table_of("prune_decisions", kPruneDecisionColumns, kMerged),
          table_of("tune_searches", kTuneSearchColumns),
          table_of("tune_rounds", kTuneRoundColumns),
          table_of("tune_candidates", kTuneCandidateColumns),
          table_of("tune_jobs", kTuneJobColumns)};
}

}  // namespace

const char* declared_type(ColumnType type) {
  switch (type) {
    case ColumnType::kInteger:
      return "INTEGER";
    case ColumnType::kReal:
      return "REAL";
    case ColumnType::kText:
      return "TEXT";
    case ColumnType::kJson:
      return "JSON";
    case ColumnType::kNone:
      break;
  }
  return "";
}

std::string Column::sqlite_types() const {
  std::string types = type == ColumnType::kInteger ? "'integer'"
                      : type == ColumnType::kReal  ? "'real', 'integer'"
                                                   : "'text'";
  return not_null ? types : types + ", 'null'";
}

const Column* Table::find(std::string_view name) const {
  for (const Column& column : columns) {
    if (same_name(column.name, std::string(name))) return &column;
  }
  return nullptr;
}

const std::vector<Table>& tables() {
  static const std::vector<Table> all = described_tables();
  return all;
}

const Table& table(std::string_view name) {
  for (const Table& t : tables()) {
    if (same_name(t.name, std::string(name))) return t;
  }
  throw std::logic_error("store/columns.cpp describes no table " + std::string(name));
}

std::vector<std::string> schema_differences(sqlite3* db, const std::vector<Table>& described) {
  std::vector<std::string> out;
  std::vector<std::string> names;
  sql::Statement list(db,
                      "SELECT name FROM sqlite_master WHERE type = 'table' AND "
                      "name NOT LIKE 'sqlite_%' ORDER BY name");
  while (list.step()) names.push_back(list.column_text(0));
  for (const std::string& name : names) {
    bool found = false;
    for (const Table& t : described) found = found || same_name(t.name, name);
    if (!found) out.push_back("table " + name + " is not described");
  }
  for (const Table& t : described) {
    sql::Statement info(db, "SELECT name, type, \"notnull\" FROM pragma_table_info(?) ORDER BY cid",
                        std::string(t.name));
    std::vector<std::string> in_db;
    while (info.step()) {
      const std::string column = info.column_text(0);
      in_db.push_back(column);
      const Column* c = t.find(column);
      const std::string where = std::string(t.name) + "." + column;
      if (!c) {
        out.push_back(where + " is in the schema but not described");
        continue;
      }
      if (info.column_text(1) != declared_type(c->type)) {
        out.push_back(where + " is declared '" + info.column_text(1) + "', described '" +
                      declared_type(c->type) + "'");
      }
      if ((info.column_int(2) != 0) != c->not_null) {
        out.push_back(where + (c->not_null ? " may be NULL" : " is NOT NULL") +
                      " in the schema, described otherwise");
      }
    }
    if (in_db.empty()) out.push_back("table " + std::string(t.name) + " is not in the schema");
    for (const Column& c : t.columns) {
      bool there = false;
      for (const std::string& column : in_db) there = there || same_name(column, c.name);
      if (!there && !in_db.empty()) {
        out.push_back(std::string(t.name) + "." + c.name + " is described but not in the schema");
      }
    }
  }
  return out;
}

Row::Row(const std::string& path, const Table& table, const sql::Statement& statement,
         std::string_view id_column)
    : path_(path), table_(table), statement_(statement) {
  for (int c = 0; c < statement.column_count(); ++c) {
    names_.push_back(statement.column_name(c));
    specs_.push_back(table.find(names_.back()));
  }
  id_at_ = at(id_column);
}

int Row::index(std::string_view name) const {
  for (size_t c = 0; c < names_.size(); ++c) {
    if (same_name(names_[c], std::string(name))) return static_cast<int>(c);
  }
  return -1;
}

int Row::at(std::string_view name) const {
  const int c = index(name);
  if (c < 0) {
    throw std::logic_error("a reader of table " + std::string(table_.name) + " selects no column " +
                           std::string(name));
  }
  return c;
}

int64_t Row::id() const { return statement_.column_int(id_at_); }

Cell Row::cell(std::string_view name) const { return value(name).cell(); }

Value Row::value(std::string_view name) const { return Value(*this, at(name)); }
Value Row::value(int index) const { return Value(*this, index); }
bool Row::is_null(std::string_view name) const { return value(name).is_null(); }
int64_t Row::integer(std::string_view name, int64_t min, int64_t max) const {
  return value(name).integer(min, max);
}
int Row::small(std::string_view name, int if_null) const { return value(name).small(if_null); }
double Row::number(std::string_view name) const { return value(name).number(); }
std::string Row::text(std::string_view name) const { return value(name).text(); }

int64_t Value::integer(int64_t min, int64_t max) const {
  if (const Column* spec = column()) {
    min = spec->min;
    max = spec->max;
  }
  return int_column(row_.path_, row_.statement_, at_, cell(), min, max);
}

int Value::small(int if_null) const {
  if (is_null()) return if_null;
  return static_cast<int>(integer(std::numeric_limits<int>::min(), kMaxInt));
}

double Value::number() const { return real_column(row_.path_, row_.statement_, at_, cell()); }

void Value::require_json_object() const { json_object_column(row_.path_, cell(), text()); }

}  // namespace amptune::store::detail
