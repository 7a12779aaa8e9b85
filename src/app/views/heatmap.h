// Heatmaps of a sweep's comparison table (app/views/compare.h): one per pair of its --by keys (the
// swept keys, in the report and the live view), the metric of each combination as a coloured
// cell. Both writers draw them from this model: the report's gnuplot PNGs
// (app/views/report_heatmap.cpp) and the live view's SVG (web/svg.h svg_heatmap).
//
//   CompareTable (rows ranked, by_values, value, run_ids)        one owner of the values
//     -> build_heatmaps(table, run statuses, tune answer run)    this file: no store, no I/O
//     -> HeatMap per pair: axes in the sweep's order, cells, marks, the answer's cell
//
// A cell shows the table row of its two values: with more than two keys, the best of the rows
// that share them (the first in the table's rank order: the best value in the metric's
// direction, rows without a value last), so "O1 x dynamic" is the best any dtype reached there.
// No torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/views/compare.h"
#include "records/records.h"

namespace amptune::app {

// At most this many heatmaps (pairs of keys, in key order) and values per axis: a page stays
// readable and bounded (the rest are said to be left out).
constexpr size_t kMaxHeatmaps = 10;
constexpr size_t kMaxHeatValues = 24;
// A key's value on an axis is shortened (app/views/table.h shortened) past this many characters.
constexpr size_t kHeatLabelChars = 40;

// How the runs of a cell's row ended, when not as planned; the most severe of its runs (failed,
// then diverged, then pruned).
enum class HeatMark { kNone, kPruned, kDiverged, kFailed };
std::string to_string(HeatMark mark);  // "", "pruned", "diverged", "failed"

struct HeatCell {
  size_t x = 0, y = 0;  // indices into HeatMap::x_values / y_values
  // The table's value of the row the cell shows (CompareRow::value); unset: none yet.
  std::optional<double> value;
  HeatMark mark = HeatMark::kNone;
  std::string status;   // the row's status words (CompareRow::status: "done", "done:1 pruned:1")
  bool answer = false;  // the tune search's answer is a run of this cell
  int rows = 1;         // the table rows with this cell's two values (one shown)
  // The other keys' values of the row shown ("amp.dtype=fp16"); empty with two keys.
  std::string others;
};

struct HeatMap {
  std::string y_key, x_key;  // rows (the key of more values), columns
  // Display texts (by_text) in the sweep's order: the order of the grid's cells, not sorted.
  std::vector<std::string> y_values, x_values;
  std::vector<std::string> other_keys;  // the --by keys the cells take the best over
  std::vector<HeatCell> cells;          // the combinations the table has, by (y, x); no other
  std::string metric, epoch;            // CompareTable::metric, ::epoch
  bool higher_is_better = true;
  // The range of the finite values (both unset when there is none): the colour scale's ends.
  std::optional<double> lo, hi;
};

struct HeatMaps {
  std::vector<HeatMap> maps;
  // Pairs not drawn: past kMaxHeatmaps, or with a key of more than kMaxHeatValues values.
  std::vector<std::string> left_out;  // "a x b (31 values of b)"
};

// The heatmaps of `table` (none with fewer than two --by keys), a pair of keys each in the
// table's order of its keys; of a pair, the key of more values makes the rows (a page is
// narrower than it is long), the earlier on a tie. `status`: each run's status by id (the marks;
// a run not in it counts as done); `answer_run`: the tune search's answer, when the sweep has an
// answered search.
HeatMaps build_heatmaps(const CompareTable& table,
                        const std::map<int64_t, records::RunStatus>& status,
                        std::optional<int64_t> answer_run);

// The pairs `maps` left out, in a sentence both writers print; "" when none was.
std::string heatmaps_left_out(const HeatMaps& maps);
// The text in a cell: its value with 4 significant digits, "-" without one.
std::string heat_cell_text(const HeatCell& cell);
// The title both writers give a heatmap: "acc1 (best epoch): amp.opt_level x amp.loss_scale".
std::string heatmap_title(const HeatMap& map);
// The scale's direction in words: "higher is better".
std::string heatmap_direction(const HeatMap& map);
// What a heatmap shows, in a sentence or two both writers print under it: the cells' values,
// the other keys' rule, the colours and marks.
std::string heatmap_note(const HeatMap& map);

// Where `value` sits on the colour scale: 0 the worst value of the map, 1 the best, in the
// metric's direction; 0.5 when all values are equal.
double heat_goodness(const HeatMap& map, double value);
// The colour scale (viridis: dark purple worst, yellow best), stops at 0, 0.25, ... 1, as
// "#rrggbb"; heat_colour interpolates it. Both writers draw with these.
const std::vector<std::pair<double, std::string>>& heat_stops();
std::string heat_colour(double goodness);
// Whether a cell of this goodness is dark enough for white text.
bool heat_dark(double goodness);
// The fill of a cell without a value.
extern const char* const kHeatNoValue;
// The outline of the answer's cell.
extern const char* const kHeatAnswer;

}  // namespace amptune::app
