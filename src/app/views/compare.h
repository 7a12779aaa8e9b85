// The comparison (pivot) table of a sweep, shared by `amptune compare` and `amptune report`:
// one row per combination of --by values, the metric taken per run at the chosen epoch and
// averaged over the group's runs, ranked in the metric's direction. Reads the database through
// Store::runs, Store::setting_columns and the typed reads of the query side (metric_values,
// run_totals, ...); holds no SQL.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace amptune::app {

struct CompareOptions {
  std::string sweep;
  // Grouping keys: swept keys (run_params, e.g. "optim.lr") or setting columns of runs
  // (Store::setting_columns(): opt_level, loss_scale, seed, ...). Empty: every swept key of the
  // sweep (no key at all: one row per run, grouped by run name).
  std::vector<std::string> by;
  std::string metric;  // empty: the runs' primary metric (they must agree)
  // More metrics shown beside it (--also): each run's value at the epoch `metric` was taken
  // from, averaged like it. Known names only, as --metric, and none that is a column already
  // (overflow_steps, ...); the metric itself and repeats are left out.
  std::vector<std::string> also;
  std::string epoch = "best";  // "best" | "last" | a 0-based epoch number
  std::vector<std::pair<std::string, std::string>> baseline;  // key=value pairs, keys in `by`
};

struct CompareRow {
  std::vector<nlohmann::json> by_values;  // one per CompareTable::by (JSON value of the key)
  std::vector<int64_t> run_ids;           // runs of the group, in cell order
  int runs = 0;
  int runs_with_value = 0;
  std::optional<double> value;  // mean over the group's runs that have a value
  // Per CompareTable::also: the mean over the group's runs that have a value of it at their
  // chosen epoch.
  std::vector<std::optional<double>> also_values;
  std::vector<int> best_epochs;    // distinct, sorted; the epochs the value was taken from
  std::optional<double> mean_fps;  // mean of the runs' mean train img/s
  // Mean of the runs' model FLOPs utilisation at their mean img/s (records::RunWork::mfu: a share
  // of the peak, 0.05 is 5%); unset when no run of the group has its work and peak.
  std::optional<double> mfu;
  std::optional<double> overflow_steps, skipped_steps;  // summed over epochs and runs
  std::string status;           // "done", or "done:2 running:1" for a mixed group
  std::optional<double> delta;  // value - baseline value (only with a baseline)
  std::optional<int> rank;      // 1 = best in the metric's direction; ties share a rank
  int first_cell = 0;
};

struct CompareTable {
  std::string sweep;
  std::vector<std::string> by;
  std::string metric;
  std::vector<std::string> also;  // CompareOptions::also, without `metric`
  bool higher_is_better = true;
  std::string epoch;  // as requested
  bool has_baseline = false;
  std::vector<CompareRow> rows;  // best first (rank order), rows without a value last
};

// Builds the table. Throws UsageError for an unknown sweep, --by key, metric or --also metric
// (the message lists the known ones), an --also metric that is a column already, a malformed
// --epoch, a baseline key that is not a --by key, or a baseline that matches no row (naming the
// key).
CompareTable build_compare(const store::Store& store, const CompareOptions& options);
// The same, from the sweep's runs already read (store.runs(options.sweep)), so a caller that
// holds them (the report) does not hold them twice.
CompareTable build_compare(const store::Store& store, const CompareOptions& options,
                           const std::vector<records::RunRow>& runs);

// Display text of a by-value: strings unquoted, numbers as JSON spells them, null as "-".
std::string by_text(const nlohmann::json& value);

// The writers of amptune compare --format text | csv | json. Text: a heading line and an aligned
// table of display values; CSV: RFC 4180 with CRLF, full precision, empty fields for missing
// values; JSON: an array of objects, keys in column order, null for missing values.
void write_compare_text(const CompareTable& table, std::ostream& out);
void write_compare_csv(const CompareTable& table, std::ostream& out);
nlohmann::ordered_json compare_json(const CompareTable& table);

// Column names of the table, in output order (by keys, runs, metric, the --also metrics,
// best_epoch, ...).
std::vector<std::string> compare_columns(const CompareTable& table);
// One row as display strings (text/HTML), in compare_columns order.
std::vector<std::string> compare_cells(const CompareTable& table, const CompareRow& row);

}  // namespace amptune::app
