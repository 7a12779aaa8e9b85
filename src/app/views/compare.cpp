#include "app/views/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "app/views/table.h"
#include "core/config.h"
#include "core/error.h"

namespace amptune::app {
namespace {

using json = nlohmann::json;

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

std::string number(double value) { return json(value).dump(); }  // shortest round-trip

// Parses a --baseline value or a setting column as JSON when it is one (0.1, true, "x"), else
// as a plain string.
json parse_loose(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception&) {
    return json(text);
  }
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y));
  }
  return a == b || by_text(a) == by_text(b);
}

void require_sweep(const store::Store& store, const std::string& sweep) {
  if (sweep.empty()) throw UsageError("amptune compare needs --sweep NAME");
  const std::vector<std::string> names = store.sweep_names();
  if (contains(names, sweep)) return;
  throw UsageError("no sweep '" + sweep + "' in " + store.path() +
                   " (sweeps: " + (names.empty() ? "none" : join(names, ", ")) + ")");
}

// --epoch N as a number; unset for best / last.
std::optional<int> epoch_number(const std::string& epoch) {
  if (epoch == "best" || epoch == "last") return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(epoch.c_str(), &end, 10);
  if (epoch.empty() || *end != '\0' || n < 0) {
    throw UsageError("--epoch must be best, last or an epoch number >= 0, not '" + epoch + "'");
  }
  return static_cast<int>(n);
}

// The swept keys of the runs (run_params), in first-seen order; `axes` gets each run's object.
std::vector<std::string> swept_keys(const std::vector<records::RunRow>& runs,
                                    std::vector<json>* axes) {
  std::vector<std::string> keys;
  axes->assign(runs.size(), json::object());
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].axes_json.empty()) (*axes)[i] = json::parse(runs[i].axes_json);
    for (const auto& item : (*axes)[i].items()) {
      if (!contains(keys, item.key())) keys.push_back(item.key());
    }
  }
  return keys;
}

void check_by_keys(const store::Store& store, const CompareOptions& options,
                   const std::vector<std::string>& by, const std::vector<std::string>& swept) {
  const std::vector<std::string> columns = store.setting_columns();
  for (const auto& key : by) {
    if (contains(swept, key) || contains(columns, key)) continue;
    throw UsageError("unknown --by key '" + key + "' for sweep '" + options.sweep +
                     "'; swept keys: " + (swept.empty() ? "none" : join(swept, ", ")) +
                     "; run columns: " + join(columns, ", "));
  }
}

// A metric of --metric / --also must be known: in metric_info or recorded for the sweep.
void require_metric(const store::Store& store, const CompareOptions& options,
                    const std::string& flag, const std::string& metric) {
  const std::vector<std::string> known = store.metric_names(options.sweep);
  if (contains(known, metric) || store.higher_is_better(metric)) return;
  throw UsageError("unknown " + flag + " '" + metric + "' for sweep '" + options.sweep +
                   "'; known metrics: " + join(known, ", "));
}

// --metric when given, else the runs' common primary metric.
std::string choose_metric(const store::Store& store, const CompareOptions& options,
                          const std::vector<records::RunRow>& runs) {
  if (!options.metric.empty()) {
    require_metric(store, options, "--metric", options.metric);
    return options.metric;
  }
  std::set<std::string> primaries;
  for (const auto& run : runs) primaries.insert(run.primary_metric);
  if (primaries.size() > 1) {
    throw UsageError("the runs of sweep '" + options.sweep + "' have different primary metrics (" +
                     join({primaries.begin(), primaries.end()}, ", ") +
                     "); choose one with --metric");
  }
  return primaries.empty() ? "acc1" : *primaries.begin();
}

// What one run contributes: the metric value --epoch chose and its epoch, the --also metrics
// at that epoch, and its totals.
struct PerRun {
  std::optional<double> value;
  int epoch = -1;
  std::vector<std::optional<double>> also;
  store::Store::RunTotals totals;
};

std::map<int64_t, PerRun> per_run_values(const store::Store& store, const CompareTable& table,
                                         std::optional<int> number) {
  std::map<int64_t, PerRun> per_run;
  for (const auto& v : store.metric_values(table.sweep, table.metric)) {
    PerRun& p = per_run[v.run_id];
    bool take = false;
    if (number) {
      take = v.epoch == *number;
    } else if (table.epoch == "last") {
      take = true;  // values come in epoch order: the last one wins
    } else {
      take = !p.value || (table.higher_is_better ? v.value > *p.value : v.value < *p.value);
    }
    if (take) {
      p.value = v.value;
      p.epoch = v.epoch;
    }
  }
  for (auto& [id, p] : per_run) p.also.resize(table.also.size());
  for (size_t i = 0; i < table.also.size(); ++i) {
    for (const auto& v : store.metric_values(table.sweep, table.also[i])) {
      const auto found = per_run.find(v.run_id);
      if (found != per_run.end() && found->second.value && found->second.epoch == v.epoch) {
        found->second.also[i] = v.value;
      }
    }
  }
  for (const auto& totals : store.run_totals(table.sweep)) per_run[totals.run_id].totals = totals;
  return per_run;
}

// One row per distinct combination of --by values (no key at all: one row per run), in the
// order of the runs' first cell; each with its run ids.
void group_runs(const std::vector<records::RunRow>& runs, const std::vector<json>& axes,
                CompareTable* table) {
  std::map<std::vector<std::string>, size_t> group_of;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    std::vector<json> values;
    std::vector<std::string> key;
    for (const auto& by : table->by) {
      json value;
      if (axes[i].contains(by)) {
        value = axes[i][by];
      } else if (auto it = run.columns.find(by); it != run.columns.end()) {
        value = parse_loose(it->second);
      }
      key.push_back(value.dump());
      values.push_back(value);
    }
    if (table->by.empty()) key.push_back(run.name);
    auto [it, inserted] = group_of.emplace(key, table->rows.size());
    if (inserted) {
      CompareRow row;
      row.by_values = values;
      row.first_cell = run.cell_index;
      table->rows.push_back(row);
    }
    table->rows[it->second].run_ids.push_back(run.id);
  }
}

// A mean over the values that are set; unset when none is.
class Mean {
 public:
  void add(const std::optional<double>& value) {
    if (!value) return;
    sum_ += *value;
    ++n_;
  }
  std::optional<double> get() const { return n_ ? std::optional<double>(sum_ / n_) : std::nullopt; }
  int count() const { return n_; }

 private:
  double sum_ = 0;
  int n_ = 0;
};

// Means and sums over the runs of a row, its status words.
void fill_row(CompareRow* row, size_t also, const std::map<int64_t, PerRun>& per_run,
              const std::map<int64_t, const records::RunRow*>& run_of) {
  row->runs = static_cast<int>(row->run_ids.size());
  Mean value, fps, mfu;
  std::vector<Mean> also_means(also);
  std::set<int> epochs;
  std::map<std::string, int> statuses;
  for (int64_t id : row->run_ids) {
    const auto found = per_run.find(id);
    const PerRun p = found == per_run.end() ? PerRun{} : found->second;
    value.add(p.value);
    if (p.value) epochs.insert(p.epoch);
    for (size_t i = 0; i < p.also.size(); ++i) also_means[i].add(p.also[i]);
    fps.add(p.totals.mean_fps);
    if (p.totals.mean_fps) mfu.add(run_of.at(id)->work.mfu(*p.totals.mean_fps));
    if (p.totals.overflow_steps) {
      row->overflow_steps = row->overflow_steps.value_or(0) + *p.totals.overflow_steps;
    }
    if (p.totals.skipped_steps) {
      row->skipped_steps = row->skipped_steps.value_or(0) + *p.totals.skipped_steps;
    }
    ++statuses[records::to_string(run_of.at(id)->status)];
  }
  row->runs_with_value = value.count();
  row->value = value.get();
  for (const Mean& mean : also_means) row->also_values.push_back(mean.get());
  row->mean_fps = fps.get();
  row->mfu = mfu.get();
  row->best_epochs.assign(epochs.begin(), epochs.end());
  if (statuses.size() == 1) {
    row->status = statuses.begin()->first;
  } else {
    for (const auto& [status, n] : statuses) {
      row->status += (row->status.empty() ? "" : " ") + status + ":" + std::to_string(n);
    }
  }
}

// Orders best first in the metric's direction (rows without a value last, then by cell order)
// and numbers the rows; equal values share a rank.
void rank_rows(CompareTable* table) {
  const bool higher = table->higher_is_better;
  std::stable_sort(table->rows.begin(), table->rows.end(),
                   [higher](const CompareRow& a, const CompareRow& b) {
                     if (a.value.has_value() != b.value.has_value()) return a.value.has_value();
                     if (a.value && *a.value != *b.value) {
                       return higher ? *a.value > *b.value : *a.value < *b.value;
                     }
                     return a.first_cell < b.first_cell;
                   });
  auto& rows = table->rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].value) continue;
    rows[i].rank = (i > 0 && rows[i - 1].value && *rows[i - 1].value == *rows[i].value)
                       ? rows[i - 1].rank
                       : std::optional<int>(static_cast<int>(i) + 1);
  }
}

size_t by_column(const CompareTable& table, const std::string& key) {
  return static_cast<size_t>(std::find(table.by.begin(), table.by.end(), key) - table.by.begin());
}

// Finds the --baseline row (each key must be a --by key and match some row, and all keys one
// row together) and sets every row's delta to it.
void apply_baseline(const CompareOptions& options, CompareTable* table) {
  table->has_baseline = true;
  for (const auto& [key, text] : options.baseline) {
    if (!contains(table->by, key)) {
      throw UsageError("--baseline key '" + key + "' is not a --by key (by: " +
                       (table->by.empty() ? "none" : join(table->by, ", ")) + ")");
    }
    const size_t column = by_column(*table, key);
    const json wanted = parse_loose(text);
    std::set<std::string> seen;
    bool any = false;
    for (const auto& row : table->rows) {
      any = any || same_value(row.by_values[column], wanted);
      seen.insert(by_text(row.by_values[column]));
    }
    if (!any) {
      throw UsageError("--baseline " + key + "=" + text + " matches no row; " + key +
                       " has the values " + join({seen.begin(), seen.end()}, ", "));
    }
  }
  const CompareRow* base = nullptr;
  for (const auto& row : table->rows) {
    bool match = true;
    for (const auto& [key, text] : options.baseline) {
      match = match && same_value(row.by_values[by_column(*table, key)], parse_loose(text));
    }
    if (match) {
      base = &row;
      break;
    }
  }
  if (!base) {
    std::string spec;
    for (const auto& [key, text] : options.baseline) {
      spec += (spec.empty() ? "" : ",") + key + "=" + text;
    }
    throw UsageError("--baseline " + spec +
                     " matches no single row (each key matches some row, but not all together); "
                     "first key: " +
                     options.baseline[0].first);
  }
  if (!base->value) return;
  const double base_value = *base->value;
  for (auto& row : table->rows) {
    if (row.value) row.delta = *row.value - base_value;
  }
}

}  // namespace

std::string by_text(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

CompareTable build_compare(const store::Store& store, const CompareOptions& options) {
  require_sweep(store, options.sweep);
  return build_compare(store, options, store.runs(options.sweep));
}

CompareTable build_compare(const store::Store& store, const CompareOptions& options,
                           const std::vector<records::RunRow>& runs) {
  require_sweep(store, options.sweep);
  CompareTable table;
  table.sweep = options.sweep;
  table.epoch = options.epoch;
  const std::optional<int> number = epoch_number(options.epoch);

  std::vector<json> axes;
  const std::vector<std::string> swept = swept_keys(runs, &axes);
  table.by = options.by.empty() ? swept : options.by;
  check_by_keys(store, options, table.by, swept);
  table.metric = choose_metric(store, options, runs);
  table.higher_is_better = store.higher_is_better(table.metric).value_or(true);
  const std::vector<std::string> columns = compare_columns(table);  // before any --also
  for (const auto& name : options.also) {
    if (name == table.metric || contains(table.also, name)) continue;
    if (contains(columns, name)) {
      throw UsageError("--also metric '" + name +
                       "' is a column of the table already (see amptune compare --help)");
    }
    require_metric(store, options, "--also metric", name);
    table.also.push_back(name);
  }

  const std::map<int64_t, PerRun> per_run = per_run_values(store, table, number);
  std::map<int64_t, const records::RunRow*> run_of;
  for (const auto& run : runs) run_of[run.id] = &run;
  group_runs(runs, axes, &table);
  for (auto& row : table.rows) fill_row(&row, table.also.size(), per_run, run_of);
  rank_rows(&table);
  if (!options.baseline.empty()) apply_baseline(options, &table);
  return table;
}

std::vector<std::string> compare_columns(const CompareTable& table) {
  std::vector<std::string> names = table.by;
  names.push_back("runs");
  names.push_back(table.metric);
  names.insert(names.end(), table.also.begin(), table.also.end());
  names.push_back(table.epoch == "best" ? "best_epoch" : "epoch");
  for (const char* name : {"img_s", "mfu", "overflow_steps", "skipped_steps", "status", "rank"}) {
    names.push_back(name);
  }
  if (table.has_baseline) names.push_back("delta");
  return names;
}

namespace {

std::string epochs_text(const std::vector<int>& epochs) {
  std::vector<std::string> parts;
  for (int e : epochs) parts.push_back(std::to_string(e));
  return join(parts, ";");
}

// Cells for text (display precision) or CSV (full precision, empty for missing).
std::vector<std::string> cells(const CompareTable& table, const CompareRow& row, bool exact) {
  const std::string missing = exact ? "" : "-";
  auto num = [&](const std::optional<double>& v, int digits) {
    return v ? (exact ? number(*v) : significant(*v, digits)) : missing;
  };
  std::vector<std::string> out;
  for (const auto& value : row.by_values) out.push_back(value.is_null() ? missing : by_text(value));
  out.push_back(std::to_string(row.runs));
  out.push_back(num(row.value, 6));
  for (const auto& value : row.also_values) out.push_back(num(value, 6));
  out.push_back(row.best_epochs.empty() ? missing : epochs_text(row.best_epochs));
  out.push_back(row.mean_fps ? (exact ? number(*row.mean_fps) : fixed(*row.mean_fps, 1)) : missing);
  out.push_back(!row.mfu ? missing
                : exact  ? number(*row.mfu)
                         : significant(100 * *row.mfu, 3) + "%");
  out.push_back(num(row.overflow_steps, 12));
  out.push_back(num(row.skipped_steps, 12));
  out.push_back(row.status);
  out.push_back(row.rank ? std::to_string(*row.rank) : missing);
  if (table.has_baseline) {
    if (row.delta && !exact) {
      out.push_back((*row.delta >= 0 ? "+" : "") + significant(*row.delta, 4));
    } else {
      out.push_back(num(row.delta, 4));
    }
  }
  return out;
}

std::string csv_field(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

std::vector<std::string> compare_cells(const CompareTable& table, const CompareRow& row) {
  return cells(table, row, false);
}

void write_compare_text(const CompareTable& table, std::ostream& out) {
  Table text(compare_columns(table));
  for (const auto& row : table.rows) text.add(cells(table, row, false));
  out << "sweep " << table.sweep << ": " << table.metric << " ("
      << (table.higher_is_better ? "higher" : "lower") << " is better), epoch " << table.epoch
      << ", " << table.rows.size() << " rows\n";
  text.print(out);
}

void write_compare_csv(const CompareTable& table, std::ostream& out) {
  auto line = [&](const std::vector<std::string>& fields) {
    for (size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << csv_field(fields[i]);
    out << "\r\n";
  };
  line(compare_columns(table));
  for (const auto& row : table.rows) line(cells(table, row, true));
}

nlohmann::ordered_json compare_json(const CompareTable& table) {
  using ojson = nlohmann::ordered_json;
  ojson rows = ojson::array();
  auto opt = [](const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); };
  for (const auto& row : table.rows) {
    ojson object = ojson::object();
    for (size_t i = 0; i < table.by.size(); ++i) object[table.by[i]] = row.by_values[i];
    object["runs"] = row.runs;
    object[table.metric] = opt(row.value);
    for (size_t i = 0; i < table.also.size(); ++i) object[table.also[i]] = opt(row.also_values[i]);
    ojson epochs = nullptr;
    if (row.best_epochs.size() == 1) epochs = row.best_epochs[0];
    if (row.best_epochs.size() > 1) epochs = row.best_epochs;
    object[table.epoch == "best" ? "best_epoch" : "epoch"] = epochs;
    object["img_s"] = opt(row.mean_fps);
    object["mfu"] = opt(row.mfu);
    object["overflow_steps"] = opt(row.overflow_steps);
    object["skipped_steps"] = opt(row.skipped_steps);
    object["status"] = row.status;
    object["rank"] = row.rank ? ojson(*row.rank) : ojson(nullptr);
    if (table.has_baseline) object["delta"] = opt(row.delta);
    rows.push_back(object);
  }
  return rows;
}

}  // namespace amptune::app
