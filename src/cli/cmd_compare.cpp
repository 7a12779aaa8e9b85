// `amptune compare`: the pivot table of a sweep (one row per combination of --by values), as
// text, CSV or JSON. The table itself (build_compare) is shared with `amptune report`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>

#include "cli/commands.h"
#include "cli/compare.h"
#include "cli/table.h"
#include "core/error.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace amptune::cli {
namespace {

// Columns of the epochs table that epoch_values exposes as metrics.
const std::set<std::string> kEpochColumns = {"train_loss", "lr", "train_fps_mean",
                                             "epoch_seconds"};

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string current;
  std::istringstream in(text);
  while (std::getline(in, current, separator)) {
    if (!current.empty()) parts.push_back(current);
  }
  return parts;
}

double to_double(const std::optional<std::string>& text) {
  return text ? std::strtod(text->c_str(), nullptr) : std::nan("");
}

std::string number(double value) { return json(value).dump(); }  // shortest round-trip

std::string significant(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
  return buffer;
}

// Parses a --baseline value as JSON when it is one (0.1, true, "x"), else as a plain string.
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

std::vector<std::string> metric_names(const store::Store& store, const std::string& sweep) {
  auto result = store.query(
      "SELECT DISTINCT m.name FROM metrics m WHERE m.run_id IN "
      "(SELECT r.id FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = ?1) "
      "ORDER BY m.name",
      {sweep});
  std::set<std::string> names(kEpochColumns.begin(), kEpochColumns.end());
  for (const auto& row : result.rows) names.insert(row[0].value_or(""));
  return {names.begin(), names.end()};
}

}  // namespace

std::string by_text(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

CompareTable build_compare(const store::Store& store, const CompareOptions& options) {
  CompareTable table;
  table.sweep = options.sweep;
  table.epoch = options.epoch;
  if (options.sweep.empty()) throw UsageError("amptune compare needs --sweep NAME");
  if (store.query("SELECT 1 FROM sweeps WHERE name = ?1", {options.sweep}).rows.empty()) {
    std::vector<std::string> names;
    for (const auto& row : store.query("SELECT name FROM sweeps ORDER BY name").rows) {
      names.push_back(row[0].value_or(""));
    }
    throw UsageError("no sweep '" + options.sweep + "' in " + store.path() + " (sweeps: " +
                     (names.empty() ? "none" : join(names, ", ")) + ")");
  }
  std::optional<int> epoch_number;
  if (options.epoch != "best" && options.epoch != "last") {
    char* end = nullptr;
    long n = std::strtol(options.epoch.c_str(), &end, 10);
    if (options.epoch.empty() || *end != '\0' || n < 0) {
      throw UsageError("--epoch must be best, last or an epoch number >= 0, not '" +
                       options.epoch + "'");
    }
    epoch_number = static_cast<int>(n);
  }

  const std::vector<store::RunRow> runs = store.runs(options.sweep);

  // Known keys: swept keys first (in first-seen order), then the setting columns of runs.
  std::vector<std::string> swept;
  std::vector<json> axes(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    axes[i] = runs[i].axes_json.empty() ? json::object() : json::parse(runs[i].axes_json);
    for (const auto& item : axes[i].items()) {
      if (std::find(swept.begin(), swept.end(), item.key()) == swept.end()) {
        swept.push_back(item.key());
      }
    }
  }
  const std::vector<std::string> columns = store.setting_columns();
  table.by = options.by.empty() ? swept : options.by;
  for (const auto& key : table.by) {
    if (std::find(swept.begin(), swept.end(), key) == swept.end() &&
        std::find(columns.begin(), columns.end(), key) == columns.end()) {
      throw UsageError("unknown --by key '" + key + "' for sweep '" + options.sweep +
                       "'; swept keys: " + (swept.empty() ? "none" : join(swept, ", ")) +
                       "; run columns: " + join(columns, ", "));
    }
  }

  // The metric: --metric, else the runs' common primary metric.
  if (!options.metric.empty()) {
    table.metric = options.metric;
    bool known = kEpochColumns.count(table.metric) > 0 ||
                 !store.query("SELECT 1 FROM metric_info WHERE name = ?1", {table.metric})
                      .rows.empty() ||
                 !store.query("SELECT 1 FROM metrics m WHERE m.name = ?2 AND m.run_id IN "
                              "(SELECT r.id FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
                              "WHERE s.name = ?1) LIMIT 1",
                              {options.sweep, table.metric})
                      .rows.empty();
    if (!known) {
      throw UsageError("unknown --metric '" + table.metric + "' for sweep '" + options.sweep +
                       "'; known metrics: " + join(metric_names(store, options.sweep), ", "));
    }
  } else {
    std::set<std::string> primaries;
    for (const auto& run : runs) primaries.insert(run.primary_metric);
    if (primaries.size() > 1) {
      std::vector<std::string> names(primaries.begin(), primaries.end());
      throw UsageError("the runs of sweep '" + options.sweep +
                       "' have different primary metrics (" + join(names, ", ") +
                       "); choose one with --metric");
    }
    table.metric = primaries.empty() ? "acc1" : *primaries.begin();
  }
  {
    auto info = store.query("SELECT higher_is_better FROM metric_info WHERE name = ?1",
                            {table.metric});
    table.higher_is_better = info.rows.empty() || info.rows[0][0].value_or("1") != "0";
  }

  // Per run: the metric value chosen by --epoch, and its epoch.
  struct PerRun {
    std::optional<double> value;
    int epoch = -1;
    std::optional<double> fps, overflow, skipped;
  };
  std::map<int64_t, PerRun> per_run;
  {
    // From the tables rather than the epoch_values view: the UNION ALL view does not use the
    // metrics_by_run_name index (the column name spliced in below is one of kEpochColumns).
    const std::string in_sweep =
        "(SELECT r.id FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = ?1)";
    auto values =
        kEpochColumns.count(table.metric)
            ? store.query("SELECT e.run_id, e.epoch, e." + table.metric + " FROM epochs e WHERE e." +
                              table.metric + " IS NOT NULL AND e.run_id IN " + in_sweep +
                              " ORDER BY e.run_id, e.epoch",
                          {options.sweep})
            : store.query("SELECT m.run_id, m.epoch, m.value FROM metrics m WHERE m.name = ?2 AND "
                          "m.value IS NOT NULL AND m.run_id IN " + in_sweep +
                          " ORDER BY m.run_id, m.epoch",
                          {options.sweep, table.metric});
    for (const auto& row : values.rows) {
      const int64_t run_id = std::stoll(row[0].value_or("0"));
      const int epoch = std::stoi(row[1].value_or("0"));
      const double value = to_double(row[2]);
      PerRun& p = per_run[run_id];
      bool take = false;
      if (epoch_number) {
        take = epoch == *epoch_number;
      } else if (options.epoch == "last") {
        take = true;  // rows come in epoch order: the last one wins
      } else {
        take = !p.value || (table.higher_is_better ? value > *p.value : value < *p.value);
      }
      if (take) {
        p.value = value;
        p.epoch = epoch;
      }
    }
    auto extras = store.query(
        "SELECT r.id, (SELECT AVG(e.train_fps_mean) FROM epochs e WHERE e.run_id = r.id), "
        "(SELECT SUM(m.value) FROM metrics m WHERE m.run_id = r.id AND "
        "m.name = 'overflow_steps'), "
        "(SELECT SUM(m.value) FROM metrics m WHERE m.run_id = r.id AND "
        "m.name = 'skipped_steps') "
        "FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = ?1",
        {options.sweep});
    for (const auto& row : extras.rows) {
      PerRun& p = per_run[std::stoll(row[0].value_or("0"))];
      if (row[1]) p.fps = to_double(row[1]);
      if (row[2]) p.overflow = to_double(row[2]);
      if (row[3]) p.skipped = to_double(row[3]);
    }
  }

  // Group the runs by their --by values (a run without any key: one group per run).
  std::map<std::vector<std::string>, size_t> group_of;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    std::vector<json> values;
    std::vector<std::string> key;
    for (const auto& by : table.by) {
      json value;
      if (axes[i].contains(by)) {
        value = axes[i][by];
      } else if (auto it = run.columns.find(by); it != run.columns.end()) {
        value = parse_loose(it->second);
      }
      key.push_back(value.dump());
      values.push_back(value);
    }
    if (table.by.empty()) key.push_back(run.name);
    auto [it, inserted] = group_of.emplace(key, table.rows.size());
    if (inserted) {
      CompareRow row;
      row.by_values = values;
      row.first_cell = run.cell_index;
      table.rows.push_back(row);
    }
    table.rows[it->second].run_ids.push_back(run.id);
  }

  std::map<int64_t, const store::RunRow*> run_by_id;
  for (const auto& run : runs) run_by_id[run.id] = &run;
  for (auto& row : table.rows) {
    row.runs = static_cast<int>(row.run_ids.size());
    double sum = 0, fps_sum = 0;
    int fps_n = 0;
    std::set<int> epochs;
    std::map<std::string, int> statuses;
    for (int64_t id : row.run_ids) {
      const PerRun& p = per_run[id];
      if (p.value) {
        sum += *p.value;
        ++row.runs_with_value;
        epochs.insert(p.epoch);
      }
      if (p.fps) {
        fps_sum += *p.fps;
        ++fps_n;
      }
      if (p.overflow) row.overflow_steps = row.overflow_steps.value_or(0) + *p.overflow;
      if (p.skipped) row.skipped_steps = row.skipped_steps.value_or(0) + *p.skipped;
      ++statuses[store::to_string(run_by_id[id]->status)];
    }
    if (row.runs_with_value) row.value = sum / row.runs_with_value;
    if (fps_n) row.mean_fps = fps_sum / fps_n;
    row.best_epochs.assign(epochs.begin(), epochs.end());
    if (statuses.size() == 1) {
      row.status = statuses.begin()->first;
    } else {
      for (const auto& [status, n] : statuses) {
        row.status += (row.status.empty() ? "" : " ") + status + ":" + std::to_string(n);
      }
    }
  }

  // Rank in the metric's direction; rows without a value come last, then by cell order.
  const bool higher = table.higher_is_better;
  std::stable_sort(table.rows.begin(), table.rows.end(),
                   [higher](const CompareRow& a, const CompareRow& b) {
                     if (a.value.has_value() != b.value.has_value()) return a.value.has_value();
                     if (a.value && *a.value != *b.value) {
                       return higher ? *a.value > *b.value : *a.value < *b.value;
                     }
                     return a.first_cell < b.first_cell;
                   });
  for (size_t i = 0; i < table.rows.size(); ++i) {
    if (!table.rows[i].value) continue;
    table.rows[i].rank = (i > 0 && table.rows[i - 1].value &&
                          *table.rows[i - 1].value == *table.rows[i].value)
                             ? table.rows[i - 1].rank
                             : std::optional<int>(static_cast<int>(i) + 1);
  }

  if (!options.baseline.empty()) {
    table.has_baseline = true;
    for (const auto& [key, text] : options.baseline) {
      auto it = std::find(table.by.begin(), table.by.end(), key);
      if (it == table.by.end()) {
        throw UsageError("--baseline key '" + key + "' is not a --by key (by: " +
                         (table.by.empty() ? "none" : join(table.by, ", ")) + ")");
      }
      const size_t column = static_cast<size_t>(it - table.by.begin());
      const json wanted = parse_loose(text);
      std::vector<std::string> seen;
      bool any = false;
      for (const auto& row : table.rows) {
        any = any || same_value(row.by_values[column], wanted);
        seen.push_back(by_text(row.by_values[column]));
      }
      if (!any) {
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        throw UsageError("--baseline " + key + "=" + text + " matches no row; " + key +
                         " has the values " + join(seen, ", "));
      }
    }
    const CompareRow* base = nullptr;
    for (const auto& row : table.rows) {
      bool match = true;
      for (const auto& [key, text] : options.baseline) {
        const size_t column =
            static_cast<size_t>(std::find(table.by.begin(), table.by.end(), key) - table.by.begin());
        match = match && same_value(row.by_values[column], parse_loose(text));
      }
      if (match) {
        base = &row;
        break;
      }
    }
    if (!base) {
      std::string spec;
      for (const auto& [key, text] : options.baseline) spec += (spec.empty() ? "" : ",") + key + "=" + text;
      throw UsageError("--baseline " + spec + " matches no single row (each key matches some row, "
                       "but not all together); first key: " + options.baseline[0].first);
    }
    if (base->value) {
      const double base_value = *base->value;
      for (auto& row : table.rows) {
        if (row.value) row.delta = *row.value - base_value;
      }
    }
  }
  return table;
}

std::vector<std::string> compare_columns(const CompareTable& table) {
  std::vector<std::string> names = table.by;
  names.push_back("runs");
  names.push_back(table.metric);
  names.push_back(table.epoch == "best" ? "best_epoch" : "epoch");
  for (const char* name : {"img_s", "overflow_steps", "skipped_steps", "status", "rank"}) {
    names.push_back(name);
  }
  if (table.has_baseline) names.push_back("delta");
  return names;
}

namespace {

std::string epochs_text(const std::vector<int>& epochs) {
  std::vector<std::string> parts;
  for (int e : epochs) parts.push_back(std::to_string(e));
  return parts.empty() ? "" : join(parts, ";");
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
  out.push_back(row.best_epochs.empty() ? missing : epochs_text(row.best_epochs));
  out.push_back(row.mean_fps ? (exact ? number(*row.mean_fps) : fixed(*row.mean_fps, 1)) : missing);
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
    ojson epochs = nullptr;
    if (row.best_epochs.size() == 1) epochs = row.best_epochs[0];
    if (row.best_epochs.size() > 1) epochs = row.best_epochs;
    object[table.epoch == "best" ? "best_epoch" : "epoch"] = epochs;
    object["img_s"] = opt(row.mean_fps);
    object["overflow_steps"] = opt(row.overflow_steps);
    object["skipped_steps"] = opt(row.skipped_steps);
    object["status"] = row.status;
    object["rank"] = row.rank ? ojson(*row.rank) : ojson(nullptr);
    if (table.has_baseline) object["delta"] = opt(row.delta);
    rows.push_back(object);
  }
  return rows;
}

int cmd_compare(const Invocation& inv) {
  std::string db, by, format;
  std::vector<std::string> baseline;
  CompareOptions options;
  po::options_description desc("amptune compare options");
  desc.add_options()("help,h", "show this help")(
      "db", po::value(&db)->default_value(default_db()), "results database (env AMPTUNE_DB)")(
      "sweep", po::value(&options.sweep), "the sweep to compare (required)")(
      "by", po::value(&by),
      "comma-separated grouping keys: swept keys (optim.lr) or run columns (opt_level, "
      "loss_scale, seed, ...); default: every swept key")(
      "metric", po::value(&options.metric), "metric to compare (default: the primary metric)")(
      "epoch", po::value(&options.epoch)->default_value("best"),
      "best | last | N (0-based): which epoch's value each run contributes")(
      "baseline", po::value(&baseline)->multitoken(),
      "key=value,... of --by keys: the row that `delta` is measured from")(
      "format", po::value(&format)->default_value("text"), "text | csv | json");
  po::variables_map vm;
  po::store(po::command_line_parser(inv.args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: amptune compare --sweep NAME [options]\n\n"
                 "One row per combination of the --by values: the metric (mean over the group's\n"
                 "runs), its epoch, mean train img/s, overflow and skipped steps summed over\n"
                 "epochs, status, rank (1 = best) and, with --baseline, the difference to the\n"
                 "baseline row. Rows are ordered best first.\n\n"
              << desc;
    return 0;
  }
  if (options.sweep.empty()) throw UsageError("amptune compare needs --sweep NAME (see amptune list)");
  if (format != "text" && format != "csv" && format != "json") {
    throw UsageError("--format must be text, csv or json, not '" + format + "'");
  }
  options.by = split(by, ',');
  for (const auto& spec : baseline) {
    for (const auto& item : split(spec, ',')) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw UsageError("--baseline takes key=value[,key=value...], not '" + item + "'");
      }
      options.baseline.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  store::Store store = open_existing(db);
  CompareTable table = build_compare(store, options);
  if (format == "csv") {
    write_compare_csv(table, std::cout);
  } else if (format == "json") {
    std::cout << compare_json(table).dump(2) << "\n";
  } else {
    write_compare_text(table, std::cout);
  }
  return 0;
}

}  // namespace amptune::cli
