// Unit tests of the heatmaps (app/views/heatmap.h) and their gnuplot files: the model from
// hand-made comparison tables (axes in the sweep's grid order, not sorted, also when an exclude
// took a value's first combination; the marks; the answer's cell; the best over the other keys;
// the colour scale's direction; the bounds), then experiments/amp_grid.yaml's cells in a database
// written through the Store API (no training) drawn by the report: the opt_level x loss_scale
// heatmap's values are the table's, its PNG drawn by the real gnuplot, and key values with quotes,
// a line break and <script> stay inside their gnuplot strings.
#include "app/views/heatmap.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/views/report.h"
#include "app/views/report_plots.h"
#include "app/views/table.h"
#include "core/sweep.h"
#include "support/amp_grid.h"
#include "unit/app/app_fixture.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using records::RunStatus;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A row of a hand-made table: its --by values, value, first cell and runs.
CompareRow row(std::vector<json> by, std::optional<double> value, int first_cell,
               std::vector<int64_t> runs = {}) {
  CompareRow r;
  r.by_values = std::move(by);
  r.value = value;
  r.first_cell = first_cell;
  r.run_ids = runs.empty() ? std::vector<int64_t>{first_cell + 100} : std::move(runs);
  r.status = "done";
  return r;
}

CompareTable table_of(std::vector<std::string> by, std::vector<CompareRow> rows,
                      bool higher = true) {
  CompareTable t;
  t.sweep = "grid";
  t.by = std::move(by);
  t.metric = higher ? "acc1" : "mrpe";
  t.higher_is_better = higher;
  t.epoch = "best";
  t.rows = std::move(rows);
  return t;
}

const HeatCell* cell_at(const HeatMap& map, const std::string& y, const std::string& x) {
  for (const HeatCell& cell : map.cells) {
    if (map.y_values[cell.y] == y && map.x_values[cell.x] == x) return &cell;
  }
  return nullptr;
}

// opt_level [O2, O0, O1] x loss_scale [dynamic, 128, 1] listed unsorted; the table's rows come
// ranked by value, so neither the table's order nor a sort gives the grid's.
TEST(Heatmap, AxesAreInTheSweepsGridOrderNotSortedNorRanked) {
  const std::vector<json> opt = {"O2", "O0", "O1"}, scale = {"dynamic", 128, 1};
  std::vector<CompareRow> rows;
  for (int i = 0; i < 9; ++i) {
    rows.push_back(row({opt[i / 3], scale[i % 3]}, 10.0 * ((i * 5) % 9), i));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const CompareRow& a, const CompareRow& b) { return *a.value > *b.value; });
  const HeatMaps maps = build_heatmaps(table_of({"amp.opt_level", "amp.loss_scale"}, rows), {}, {});
  ASSERT_EQ(maps.maps.size(), 1u);
  const HeatMap& map = maps.maps[0];
  EXPECT_EQ(map.y_key, "amp.opt_level");
  EXPECT_EQ(map.x_key, "amp.loss_scale");
  EXPECT_EQ(map.y_values, (std::vector<std::string>{"O2", "O0", "O1"}));
  EXPECT_EQ(map.x_values, (std::vector<std::string>{"dynamic", "128", "1"}));
  ASSERT_EQ(map.cells.size(), 9u);
  for (const HeatCell& cell : map.cells) {  // each cell the value of its own row
    const int i = static_cast<int>(cell.y * 3 + cell.x);
    EXPECT_EQ(cell.value, 10.0 * ((i * 5) % 9)) << i;
    EXPECT_EQ(cell.rows, 1);
    EXPECT_TRUE(cell.others.empty());
  }
  EXPECT_EQ(map.lo, 0.0);
  EXPECT_EQ(map.hi, 80.0);
  EXPECT_EQ(heatmap_title(map), "acc1 (best epoch): amp.opt_level x amp.loss_scale");
}

// dtype [fp16, bf16] x opt_level [O0, O1, O2, O3] with fp16 x O0 excluded: the cells are numbered
// after the exclude, so O1 is the first opt_level seen; bf16's cells still say O0 comes first.
// The string "128" and the number 128 are two values.
TEST(Heatmap, AnExcludedFirstCombinationDoesNotMoveItsValue) {
  std::vector<CompareRow> rows = {row({"fp16", "O1"}, 1, 0), row({"fp16", "O2"}, 2, 1),
                                  row({"fp16", "O3"}, 3, 2), row({"bf16", "O0"}, 4, 3),
                                  row({"bf16", "O1"}, 5, 4)};
  const HeatMaps maps = build_heatmaps(table_of({"amp.dtype", "amp.opt_level"}, rows), {}, {});
  ASSERT_EQ(maps.maps.size(), 1u);
  // The key of more values makes the rows.
  EXPECT_EQ(maps.maps[0].y_values, (std::vector<std::string>{"O0", "O1", "O2", "O3"}));
  EXPECT_EQ(maps.maps[0].x_values, (std::vector<std::string>{"fp16", "bf16"}));
  EXPECT_EQ(maps.maps[0].cells.size(), 5u);  // the missing three are no cells: drawn empty
  EXPECT_EQ(cell_at(maps.maps[0], "O0", "fp16"), nullptr);
  EXPECT_EQ(cell_at(maps.maps[0], "O0", "bf16")->value, 4.0);
  const HeatMaps two = build_heatmaps(
      table_of({"a", "b"}, {row({"128", 1}, 1, 0), row({128, 1}, 2, 1), row({nullptr, 1}, 3, 2)}),
      {}, {});
  EXPECT_EQ(two.maps[0].y_values, (std::vector<std::string>{"128", "128", "-"}));
}

// A cell is marked by the most severe end among its row's runs: failed, diverged, pruned.
TEST(Heatmap, MarksAreTheMostSevereEndOfTheRowsRuns) {
  const std::vector<CompareRow> rows = {row({"a", 1}, 1, 0, {1, 2}), row({"a", 2}, 2, 1, {3, 4}),
                                        row({"b", 1}, 3, 2, {5, 6}),
                                        row({"b", 2}, std::nullopt, 3, {7})};
  const std::map<int64_t, RunStatus> status = {{1, RunStatus::kDone},   {2, RunStatus::kPruned},
                                               {3, RunStatus::kPruned}, {4, RunStatus::kDiverged},
                                               {5, RunStatus::kFailed}, {6, RunStatus::kDiverged},
                                               {7, RunStatus::kRunning}};
  const HeatMap map = build_heatmaps(table_of({"k", "n"}, rows), status, {}).maps.at(0);
  EXPECT_EQ(cell_at(map, "a", "1")->mark, HeatMark::kPruned);
  EXPECT_EQ(cell_at(map, "a", "2")->mark, HeatMark::kDiverged);
  EXPECT_EQ(cell_at(map, "b", "1")->mark, HeatMark::kFailed);
  EXPECT_EQ(cell_at(map, "b", "2")->mark, HeatMark::kNone);  // running: no value yet, no mark
  EXPECT_FALSE(cell_at(map, "b", "2")->value);
  EXPECT_EQ(heat_cell_text(*cell_at(map, "b", "2")), "-");
  EXPECT_EQ(to_string(HeatMark::kFailed), "failed");
  // Without the runs' statuses nothing is marked.
  for (const auto& cell : build_heatmaps(table_of({"k", "n"}, rows), {}, {}).maps[0].cells) {
    EXPECT_EQ(cell.mark, HeatMark::kNone);
  }
}

// Three keys: a heatmap per pair, each cell the first row of its two values in the table's rank
// order (the best over the third key), and the answer's run outlined in each pair's map.
TEST(Heatmap, WithThreeKeysACellIsTheBestRowOverTheThirdAndTheAnswerIsInEveryPair) {
  std::vector<CompareRow> rows;
  int cell = 0;
  for (const char* a : {"a1", "a2"}) {
    for (const char* b : {"b1", "b2"}) {
      for (int c : {1, 2}) rows.push_back(row({a, b, c}, cell * 1.0, cell)), ++cell;
    }
  }
  std::reverse(rows.begin(), rows.end());  // rank order: the highest value first
  const int64_t answer = 100 + 5;          // a2 b1 c=2
  const HeatMaps maps = build_heatmaps(table_of({"a", "b", "c"}, rows), {}, answer);
  ASSERT_EQ(maps.maps.size(), 3u);
  EXPECT_EQ(maps.maps[0].y_key + " " + maps.maps[0].x_key, "a b");
  EXPECT_EQ(maps.maps[1].y_key + " " + maps.maps[1].x_key, "a c");
  EXPECT_EQ(maps.maps[2].y_key + " " + maps.maps[2].x_key, "b c");
  const HeatCell* ab = cell_at(maps.maps[0], "a1", "b2");
  ASSERT_NE(ab, nullptr);
  EXPECT_EQ(ab->value, 3.0);  // a1 b2 c=2, not c=1 (2)
  EXPECT_EQ(ab->rows, 2);
  EXPECT_EQ(ab->others, "c=2");
  EXPECT_EQ(maps.maps[0].other_keys, (std::vector<std::string>{"c"}));
  const std::pair<std::string, std::string> answered[] = {{"a2", "b1"}, {"a2", "2"}, {"b1", "2"}};
  for (size_t m = 0; m < 3; ++m) {
    int outlined = 0;
    for (const HeatCell& c : maps.maps[m].cells) outlined += c.answer;
    EXPECT_EQ(outlined, 1) << m;
    EXPECT_TRUE(cell_at(maps.maps[m], answered[m].first, answered[m].second)->answer) << m;
  }
  EXPECT_TRUE(build_heatmaps(table_of({"a"}, {row({"a1"}, 1, 0)}), {}, {}).maps.empty());
}

// The scale's best end is yellow in the metric's direction: the highest acc1, the lowest mrpe.
TEST(Heatmap, TheColourScaleFollowsTheMetricsDirection) {
  const std::vector<CompareRow> rows = {row({"x", 1}, 10, 0), row({"x", 2}, 30, 1),
                                        row({"x", 3}, 20, 2)};
  const HeatMap higher = build_heatmaps(table_of({"k", "n"}, rows, true), {}, {}).maps[0];
  const HeatMap lower = build_heatmaps(table_of({"k", "n"}, rows, false), {}, {}).maps[0];
  EXPECT_EQ(heat_goodness(higher, 30), 1.0);
  EXPECT_EQ(heat_goodness(higher, 10), 0.0);
  EXPECT_EQ(heat_goodness(higher, 20), 0.5);
  EXPECT_EQ(heat_goodness(lower, 10), 1.0);
  EXPECT_EQ(heat_goodness(lower, 30), 0.0);
  EXPECT_EQ(heatmap_direction(lower), "lower is better");
  EXPECT_EQ(heat_colour(1.0), "#fde725");
  EXPECT_EQ(heat_colour(0.0), "#440154");
  EXPECT_EQ(heat_colour(0.5), "#21918c");
  EXPECT_EQ(heat_colour(0.125), "#402a70");  // halfway between the first two stops
  EXPECT_TRUE(heat_dark(0.0));
  EXPECT_FALSE(heat_dark(1.0));
  // One value: the middle of the scale.
  const HeatMap one = build_heatmaps(table_of({"k", "n"}, {row({"x", 1}, 7, 0)}), {}, {}).maps[0];
  EXPECT_EQ(heat_goodness(one, 7), 0.5);
}

// At most kMaxHeatmaps pairs, and keys of at most kMaxHeatValues values; the rest said.
TEST(Heatmap, PairsPastTheBoundsAreLeftOutAndSaid) {
  std::vector<CompareRow> rows;
  for (int i = 0; i < 25; ++i) rows.push_back(row({i, "x", "y", "z", "w", "v"}, i, i));
  const HeatMaps maps = build_heatmaps(table_of({"many", "b", "c", "d", "e", "f"}, rows), {}, {});
  EXPECT_EQ(maps.maps.size(), kMaxHeatmaps);  // 15 pairs, 5 of them with "many"
  ASSERT_EQ(maps.left_out.size(), 5u);
  EXPECT_EQ(maps.left_out[0], "many x b (25 values of many)");
  EXPECT_EQ(maps.maps[0].y_key + " " + maps.maps[0].x_key, "b c");
  EXPECT_NE(heatmaps_left_out(maps).find("Not drawn: many x b (25 values of many); "),
            std::string::npos);
  // Two keys, one of them of too many values: no heatmap, and the report says why.
  std::vector<CompareRow> two;
  for (int i = 0; i < 25; ++i) two.push_back(row({i, "x"}, i, i));
  ReportModel model;
  model.table = table_of({"many", "b"}, two);
  model.heatmaps = build_heatmaps(model.table, {}, {});
  ASSERT_TRUE(model.heatmaps.maps.empty());
  const PlotDef& def = report_plots().front();
  ASSERT_EQ(def.data, PlotData::kHeatmaps);
  EXPECT_TRUE(has_plot(model, def));
  model.heatmaps.left_out.clear();
  EXPECT_FALSE(has_plot(model, def));
}

// --- experiments/amp_grid.yaml in a database, drawn by the report --------------------------------

class HeatmapReportTest : public AppTest {
 protected:
  // amp_grid's 14 cells as runs with made-up acc1 (a run per cell, in its cell order); cell 4
  // (fp16 O1 128) pruned, 7 (fp16 O2 128) diverged, 11 (fp16 O3 1) failed, and a tune search
  // answered by cell 12 (bf16 O1 dynamic).
  void add_amp_grid() {
    const Sweep sweep = load_sweep(AMPTUNE_SOURCE_DIR "/experiments/amp_grid.yaml");
    ASSERT_EQ(sweep.cells.size(), 14u);
    for (const Cell& cell : sweep.cells) {
      Run run;
      run.sweep = "amp_grid";
      run.cell = cell.index;
      run.axes = cell.axes.dump();
      const int64_t id = add_run(run);
      ids_.push_back(id);
      add_epochs(id, "acc1", {40.0 + cell.index, 50.0 + 3 * ((cell.index * 7) % 11)});
      testing::settle_amp_grid_cell(store_, id, cell.index);
    }
    testing::add_amp_grid_search(store_, ids_);
  }
  std::vector<int64_t> ids_;
};

TEST_F(HeatmapReportTest, AmpGridsOptLevelByLossScaleIsTheTablesValuesInTheGridsOrder) {
  add_amp_grid();
  const ReportModel model = build_report(store_, "amp_grid");
  ASSERT_EQ(model.heatmaps.maps.size(), 3u);
  const HeatMap& map = model.heatmaps.maps[2];
  ASSERT_EQ(heatmap_title(map), "acc1 (best epoch): amp.opt_level x amp.loss_scale");
  ASSERT_EQ(model.table.by,
            (std::vector<std::string>{"amp.dtype", "amp.loss_scale", "amp.opt_level"}));
  EXPECT_EQ(map.y_values, (std::vector<std::string>{"O0", "O1", "O2", "O3"}));
  EXPECT_EQ(map.x_values, (std::vector<std::string>{"dynamic", "128.0", "1.0"}));  // as the table
  EXPECT_EQ(map.other_keys, (std::vector<std::string>{"amp.dtype"}));
  EXPECT_EQ(map.cells.size(), 12u);
  // Each cell: the best row of the comparison table with its two values (over amp.dtype).
  for (const HeatCell& cell : map.cells) {
    std::optional<double> best;
    std::string from;
    for (const CompareRow& r : model.table.rows) {  // the table's keys: dtype, scale, opt
      if (by_text(r.by_values[2]) != map.y_values[cell.y] ||
          by_text(r.by_values[1]) != map.x_values[cell.x] || !r.value) {
        continue;
      }
      if (!best || *r.value > *best) best = r.value, from = by_text(r.by_values[0]);
    }
    EXPECT_EQ(cell.value, best) << map.y_values[cell.y] << " " << map.x_values[cell.x];
    EXPECT_EQ(cell.others, "amp.dtype=" + from);
  }
  EXPECT_EQ(cell_at(map, "O1", "dynamic")->rows, 2);  // fp16 and bf16
  int answers = 0;
  for (const HeatCell& cell : map.cells) answers += cell.answer;
  EXPECT_EQ(answers, 1);
  EXPECT_TRUE(cell_at(map, "O1", "dynamic")->answer);
  ASSERT_NE(cell_at(map, "O1", "128.0"), nullptr);
  EXPECT_EQ(cell_at(map, "O1", "128.0")->mark, HeatMark::kPruned);
  EXPECT_EQ(cell_at(map, "O2", "128.0")->mark, HeatMark::kDiverged);
  EXPECT_EQ(cell_at(map, "O3", "1.0")->mark, HeatMark::kFailed);
  EXPECT_EQ(cell_at(map, "O0", "1.0")->mark, HeatMark::kNone);
  // The table names its keys sorted (dtype, loss_scale, opt_level); the key of more values of a
  // pair makes the rows. opt_level x dtype: bf16 has O1 and O2 only, its other cells empty.
  EXPECT_EQ(heatmap_title(model.heatmaps.maps[0]), "acc1 (best epoch): amp.loss_scale x amp.dtype");
  EXPECT_EQ(heatmap_title(model.heatmaps.maps[1]), "acc1 (best epoch): amp.opt_level x amp.dtype");
  EXPECT_EQ(model.heatmaps.maps[1].cells.size(), 6u);
  EXPECT_EQ(cell_at(model.heatmaps.maps[1], "O0", "bf16"), nullptr);
  EXPECT_TRUE(cell_at(model.heatmaps.maps[1], "O1", "bf16")->answer);
}

TEST_F(HeatmapReportTest, TheReportDrawsAPngPerPairWithTheRealGnuplot) {
  const std::string gnuplot = "/usr/bin/gnuplot";
  if (!fs::exists(gnuplot))
    GTEST_SKIP() << gnuplot << " missing (tools/install-deps.sh installs it)";
  add_amp_grid();
  const fs::path out = dir_.path() / "report";
  write_report(build_report(store_, "amp_grid"), {out.string(), gnuplot, "t"});
  const std::string html = read(out / "index.html");
  const std::string section =
      "<h2>acc1 (best epoch): amp.opt_level x amp.loss_scale</h2>\n<img src=\"heatmap_3.png\"";
  EXPECT_NE(html.find(section), std::string::npos) << html;
  for (const char* png : {"heatmap_1.png", "heatmap_2.png", "heatmap_3.png"}) {
    EXPECT_EQ(read(out / png).substr(0, 8), "\x89PNG\r\n\x1a\n") << png;
  }
  EXPECT_LT(html.find("heatmap_3.png"), html.find("metric_vs_epoch.png"));  // below the table
  const std::string gp = read(out / "report.gp");
  EXPECT_NE(gp.find("set ytics ('O0' 0, 'O1' 1, 'O2' 2, 'O3' 3) scale 0\n"), std::string::npos);
  EXPECT_NE(gp.find("set xtics ('dynamic' 0, '128.0' 1, '1.0' 2) scale 0\n"), std::string::npos);
  EXPECT_NE(gp.find("set cblabel 'acc1 (higher is better)'"), std::string::npos);
  EXPECT_NE(gp.find("title 'diverged'"), std::string::npos);
  EXPECT_NE(gp.find("title 'tune answer'"), std::string::npos);
  // The answer (bf16 O1 dynamic) outlined at O1 x dynamic: column 0, row 1.
  EXPECT_NE(gp.find("set object 1 rectangle from -0.5,0.5 to 0.5,1.5 front"), std::string::npos);
  const std::string dat = read(out / "heatmap_3.dat");
  EXPECT_NE(dat.find("\"diverged\"\n"), std::string::npos) << dat;
}

// Key values with quotes, a line break and <script> (a merged database can carry them) stay in
// their gnuplot strings: gnuplot runs no command of them and draws the map.
TEST_F(HeatmapReportTest, KeyValuesCannotInjectGnuplotCommands) {
  const std::string gnuplot = "/usr/bin/gnuplot";
  if (!fs::exists(gnuplot))
    GTEST_SKIP() << gnuplot << " missing (tools/install-deps.sh installs it)";
  const std::string marker = (dir_.path() / "injected").string();
  const std::string evil = "x'\nsystem('touch " + marker + "')\n#\"<script>alert(1)</script>";
  for (int i = 0; i < 2; ++i) {
    Run run;
    run.sweep = "evil";
    run.cell = i;
    run.axes = json{{"a\n'key", i == 0 ? evil : "plain"}, {"b", evil}}.dump();
    const int64_t id = add_run(run);
    add_epochs(id, "acc1", {1.0 + i});
    finish(id);
  }
  const fs::path out = dir_.path() / "report";
  write_report(build_report(store_, "evil"), {out.string(), gnuplot, "t"});
  EXPECT_FALSE(fs::exists(marker)) << read(out / "report.gp");
  EXPECT_EQ(read(out / "heatmap_1.png").substr(0, 8), "\x89PNG\r\n\x1a\n");
  const std::string html = read(out / "index.html");
  EXPECT_EQ(html.find("<script>alert(1)"), std::string::npos);
}

}  // namespace
}  // namespace amptune::app
