// app/views/heatmap.h: heatmaps from the comparison table, and their colour scale.
#include "app/views/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "app/views/table.h"
#include "core/config.h"  // join

namespace amptune::app {
namespace {

// One --by key's values in the sweep's order: `ids` the JSON text of each (128 and "128" are two
// values), `labels` their display text, `index` id -> position.
struct Axis {
  std::vector<std::string> ids, labels;
  std::map<std::string, size_t> index;
};

// The JSON text of `row`'s values of every --by key but `skip`: rows equal in it differ in `skip`
// alone.
std::string others_id(const CompareRow& row, size_t skip) {
  std::string id;
  for (size_t k = 0; k < row.by_values.size(); ++k) {
    if (k != skip) id += row.by_values[k].dump() + '\x1f';
  }
  return id;
}

// The values of key `k` in the order of the sweep's grid. Cells are the cartesian product of the
// axes as the sweep lists them (core/sweep.h), so of two rows that differ in `k` alone the one of
// the earlier cell has the earlier value: each such pair is an edge of the order, and the values
// are sorted along the edges, ties (and a cycle, which no grid makes) broken by the first cell a
// value appears in. That first cell alone would misplace a value whose first combinations an
// exclude: took out (O3 before O1 when O1 x fp16 is excluded and O3 x fp16 is not).
// A key of more than kMaxHeatValues values is drawn by no heatmap: its values are left unordered
// (the order takes time quadratic in them: a tune search of 100,000 rounds can have as many).
Axis axis_of(const CompareTable& table, size_t k) {
  std::map<std::string, int> first_cell;
  std::map<std::string, std::string> label;
  for (const CompareRow& row : table.rows) {
    const std::string id = row.by_values[k].dump();
    const auto [it, added] = first_cell.emplace(id, row.first_cell);
    if (!added) it->second = std::min(it->second, row.first_cell);
    if (added) label.emplace(id, by_text(row.by_values[k]));
  }
  Axis axis;
  if (first_cell.size() > kMaxHeatValues) {
    for (const auto& [id, cell] : first_cell) axis.ids.push_back(id);
    return axis;
  }
  std::map<std::string, std::vector<const CompareRow*>> groups;  // by the other keys' values
  for (const CompareRow& row : table.rows) groups[others_id(row, k)].push_back(&row);
  std::map<std::string, std::set<std::string>> after;  // id -> the ids that come after it
  std::map<std::string, int> before;                   // id -> how many come before it
  for (auto& [others, rows] : groups) {
    std::sort(rows.begin(), rows.end(), [](const CompareRow* a, const CompareRow* b) {
      return a->first_cell < b->first_cell;
    });
    for (size_t i = 1; i < rows.size(); ++i) {
      const std::string a = rows[i - 1]->by_values[k].dump(), b = rows[i]->by_values[k].dump();
      if (a != b && after[a].insert(b).second) ++before[b];
    }
  }
  std::set<std::string> left;
  for (const auto& [id, cell] : first_cell) left.insert(id);
  while (!left.empty()) {
    const std::string* next = nullptr;  // free of earlier values, else any (a cycle): first cell
    for (const bool free_only : {true, false}) {
      for (const std::string& id : left) {
        if (free_only && before[id] > 0) continue;
        if (!next || first_cell[id] < first_cell[*next]) next = &id;
      }
      if (next) break;
    }
    const std::string id = *next;
    for (const std::string& later : after[id]) --before[later];
    left.erase(id);
    axis.index[id] = axis.ids.size();
    axis.ids.push_back(id);
    axis.labels.push_back(label[id]);
  }
  return axis;
}

HeatMark mark_of(const CompareRow& row, const std::map<int64_t, records::RunStatus>& status) {
  HeatMark mark = HeatMark::kNone;
  for (int64_t id : row.run_ids) {
    const auto it = status.find(id);
    if (it == status.end()) continue;
    HeatMark run = HeatMark::kNone;
    if (it->second == records::RunStatus::kPruned) run = HeatMark::kPruned;
    if (it->second == records::RunStatus::kDiverged) run = HeatMark::kDiverged;
    if (it->second == records::RunStatus::kFailed) run = HeatMark::kFailed;
    mark = std::max(mark, run);  // the enum is in order of severity
  }
  return mark;
}

std::string others_text(const CompareTable& table, const CompareRow& row, size_t y, size_t x) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < table.by.size(); ++k) {
    if (k != y && k != x) parts.push_back(table.by[k] + "=" + by_text(row.by_values[k]));
  }
  return join(parts, ", ");
}

// The heatmap of keys y (rows) and x (columns): a cell per combination the table has, showing
// the first row of it in the table's rank order.
HeatMap heatmap(const CompareTable& table, size_t y, size_t x, const std::vector<Axis>& axes,
                const std::map<int64_t, records::RunStatus>& status,
                std::optional<int64_t> answer_run) {
  HeatMap map;
  map.y_key = table.by[y];
  map.x_key = table.by[x];
  map.y_values = axes[y].labels;
  map.x_values = axes[x].labels;
  for (size_t k = 0; k < table.by.size(); ++k) {
    if (k != y && k != x) map.other_keys.push_back(table.by[k]);
  }
  map.metric = table.metric;
  map.epoch = table.epoch;
  map.higher_is_better = table.higher_is_better;
  std::map<std::pair<size_t, size_t>, size_t> cell_of;
  for (const CompareRow& row : table.rows) {
    const size_t row_y = axes[y].index.at(row.by_values[y].dump());
    const size_t row_x = axes[x].index.at(row.by_values[x].dump());
    const auto [it, added] = cell_of.emplace(std::make_pair(row_y, row_x), map.cells.size());
    if (added) {
      HeatCell cell;
      cell.y = row_y;
      cell.x = row_x;
      cell.value = row.value;
      cell.mark = mark_of(row, status);
      cell.status = row.status;
      cell.others = others_text(table, row, y, x);
      map.cells.push_back(std::move(cell));
    } else {
      ++map.cells[it->second].rows;
    }
    const auto& ids = row.run_ids;
    if (answer_run && std::find(ids.begin(), ids.end(), *answer_run) != ids.end()) {
      map.cells[it->second].answer = true;
    }
  }
  std::sort(map.cells.begin(), map.cells.end(), [](const HeatCell& a, const HeatCell& b) {
    return std::make_pair(a.y, a.x) < std::make_pair(b.y, b.x);
  });
  for (const HeatCell& cell : map.cells) {
    if (!cell.value || !std::isfinite(*cell.value)) continue;
    map.lo = std::min(map.lo.value_or(*cell.value), *cell.value);
    map.hi = std::max(map.hi.value_or(*cell.value), *cell.value);
  }
  return map;
}

}  // namespace

std::string to_string(HeatMark mark) {
  switch (mark) {
    case HeatMark::kPruned:
      return "pruned";
    case HeatMark::kDiverged:
      return "diverged";
    case HeatMark::kFailed:
      return "failed";
    case HeatMark::kNone:
      break;
  }
  return "";
}

HeatMaps build_heatmaps(const CompareTable& table,
                        const std::map<int64_t, records::RunStatus>& status,
                        std::optional<int64_t> answer_run) {
  HeatMaps out;
  if (table.by.size() < 2) return out;
  std::vector<Axis> axes;
  for (size_t k = 0; k < table.by.size(); ++k) axes.push_back(axis_of(table, k));
  for (size_t i = 0; i < table.by.size(); ++i) {
    for (size_t j = i + 1; j < table.by.size(); ++j) {
      const bool swap = axes[j].ids.size() > axes[i].ids.size();
      const size_t y = swap ? j : i, x = swap ? i : j;
      const std::string pair = table.by[y] + " x " + table.by[x];
      const size_t most = std::max(axes[y].ids.size(), axes[x].ids.size());
      if (most > kMaxHeatValues) {
        const std::string& key = table.by[axes[y].ids.size() == most ? y : x];
        out.left_out.push_back(pair + " (" + std::to_string(most) + " values of " + key + ")");
      } else if (out.maps.size() == kMaxHeatmaps) {
        out.left_out.push_back(pair);
      } else {
        out.maps.push_back(heatmap(table, y, x, axes, status, answer_run));
      }
    }
  }
  return out;
}

std::string heatmaps_left_out(const HeatMaps& maps) {
  if (maps.left_out.empty()) return "";
  return "Not drawn: " + join(maps.left_out, "; ") + " (at most " + std::to_string(kMaxHeatmaps) +
         " heatmaps, of keys of at most " + std::to_string(kMaxHeatValues) + " values; " +
         "amptune compare --by KEY,KEY tabulates any pair).";
}

std::string heat_cell_text(const HeatCell& cell) {
  return cell.value ? significant(*cell.value, 4) : "-";
}

std::string heatmap_title(const HeatMap& map) {
  const std::string epoch =
      map.epoch == "best" || map.epoch == "last" ? map.epoch + " epoch" : "epoch " + map.epoch;
  return map.metric + " (" + epoch + "): " + map.y_key + " x " + map.x_key;
}

std::string heatmap_direction(const HeatMap& map) {
  return map.higher_is_better ? "higher is better" : "lower is better";
}

std::string heatmap_note(const HeatMap& map) {
  std::string note = "Rows " + map.y_key + ", columns " + map.x_key +
                     ", in the sweep's order; a cell is the comparison table's " + map.metric +
                     " for its two values";
  if (!map.other_keys.empty()) {
    note += ", the best row over " + join(map.other_keys, ", ") +
            " (the settings it comes from: the cell's tooltip in amptune serve, the table)";
  }
  return note + ". Yellow is the best value, dark purple the worst (" + heatmap_direction(map) +
         "); grey: no value yet; hatched: a run of the cell pruned, diverged or failed; empty: " +
         "not in the sweep; outlined in red: the tune search's answer.";
}

double heat_goodness(const HeatMap& map, double value) {
  if (!map.lo || !map.hi || !(*map.hi > *map.lo) || !std::isfinite(value)) return 0.5;
  const double t = std::clamp((value - *map.lo) / (*map.hi - *map.lo), 0.0, 1.0);
  return map.higher_is_better ? t : 1 - t;
}

const std::vector<std::pair<double, std::string>>& heat_stops() {
  static const std::vector<std::pair<double, std::string>> stops = {
      {0.0, "#440154"}, {0.25, "#3b528b"}, {0.5, "#21918c"}, {0.75, "#5ec962"}, {1.0, "#fde725"}};
  return stops;
}

namespace {

struct Rgb {
  double r, g, b;
};

Rgb rgb_of(const std::string& hex) {
  const unsigned long v = std::stoul(hex.substr(1), nullptr, 16);
  return {static_cast<double>((v >> 16) & 255), static_cast<double>((v >> 8) & 255),
          static_cast<double>(v & 255)};
}

Rgb interpolated(double goodness) {
  const auto& stops = heat_stops();
  const double t = std::clamp(goodness, 0.0, 1.0);
  size_t i = 1;
  while (i + 1 < stops.size() && t > stops[i].first) ++i;
  const Rgb a = rgb_of(stops[i - 1].second), b = rgb_of(stops[i].second);
  const double f = (t - stops[i - 1].first) / (stops[i].first - stops[i - 1].first);
  return {a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)};
}

}  // namespace

std::string heat_colour(double goodness) {
  const Rgb c = interpolated(goodness);
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", static_cast<unsigned>(std::lround(c.r)),
                static_cast<unsigned>(std::lround(c.g)), static_cast<unsigned>(std::lround(c.b)));
  return text;
}

bool heat_dark(double goodness) {
  const Rgb c = interpolated(goodness);
  return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 120;  // perceived brightness, 0..255
}

const char* const kHeatNoValue = "#d9d9d9";
const char* const kHeatAnswer = "#e41a1c";

}  // namespace amptune::app
