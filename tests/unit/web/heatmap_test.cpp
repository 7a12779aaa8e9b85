// Unit tests of the live view's heatmaps (web/svg.h svg_heatmap) from a hand-made model: a cell per
// combination the table has (colour, value, mark, tooltip), the missing ones empty, the answer
// outlined, the key of what the map holds, every key and value from the database escaped; and the
// sweep page (web/pages.h) drawing them below the comparison table, before the runs.
#include "app/views/heatmap.h"

#include <gtest/gtest.h>

#include "unit/app/app_fixture.h"
#include "web/pages.h"
#include "web/svg.h"

namespace amptune::web {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// opt_level [O0, O1] x loss_scale [dynamic, 128, 1]: O1 x 1 missing, O0 x 128 pruned, O1 x 128
// without a value yet, O1 x dynamic the answer; mrpe, lower is better.
app::HeatMap model() {
  app::HeatMap map;
  map.y_key = "amp.opt_level";
  map.x_key = "amp.loss_scale";
  map.y_values = {"O0", "O1"};
  map.x_values = {"dynamic", "128", "1"};
  map.other_keys = {"amp.dtype"};
  map.metric = "mrpe";
  map.epoch = "last";
  map.higher_is_better = false;
  auto cell = [](size_t y, size_t x, std::optional<double> value) {
    app::HeatCell c;
    c.y = y;
    c.x = x;
    c.value = value;
    c.others = "amp.dtype=fp16";
    c.rows = 2;
    return c;
  };
  map.cells = {cell(0, 0, 120.5), cell(0, 1, 300), cell(0, 2, 200), cell(1, 0, 100),
               cell(1, 1, std::nullopt)};
  map.cells[1].mark = app::HeatMark::kPruned;
  map.cells[1].status = "pruned";
  map.cells[3].answer = true;
  map.lo = 100;
  map.hi = 300;
  return map;
}

TEST(SvgHeatmap, CellsValuesMarksTheAnswerAndTheMissingCombination) {
  const std::string svg = svg_heatmap("heatmap", model(), 2);
  EXPECT_NE(svg.find("<figure class=\"plot\" data-plot=\"heatmap\"><svg"), std::string::npos);
  EXPECT_NE(svg.find("aria-label=\"mrpe (last epoch): amp.opt_level x amp.loss_scale\""),
            std::string::npos);
  EXPECT_EQ(count(svg, "<g class=\"cell\""), 5u);
  EXPECT_EQ(count(svg, "<rect class=\"empty\""), 1u);  // O1 x 1
  EXPECT_NE(svg.find("amp.opt_level=O1, amp.loss_scale=1: not in the sweep</title>"),
            std::string::npos);
  // Lower is better: the lowest value is the scale's yellow end, the highest its purple one.
  EXPECT_NE(svg.find("data-row=\"O1\" data-column=\"dynamic\" data-mark=\"\"><rect x=\""),
            std::string::npos);
  const size_t best = svg.find("data-row=\"O1\" data-column=\"dynamic\"");
  EXPECT_EQ(svg.find("fill=\"#fde725\"", best), svg.find("fill=\"", best));
  const size_t worst = svg.find("data-row=\"O0\" data-column=\"128\" data-mark=\"pruned\"");
  ASSERT_NE(worst, std::string::npos);
  EXPECT_EQ(svg.find("fill=\"#440154\"", worst), svg.find("fill=\"", worst));
  EXPECT_NE(svg.find("fill=\"url(#heatmap-2-pruned)\"", worst), std::string::npos);
  EXPECT_NE(svg.find(">pruned</text>", worst), std::string::npos);
  EXPECT_NE(svg.find("<pattern id=\"heatmap-2-pruned\""), std::string::npos);
  // Values with 4 digits in the cell, 6 in the tooltip with the row they come from.
  EXPECT_NE(svg.find(">120.5</text>"), std::string::npos);
  EXPECT_NE(svg.find("amp.opt_level=O0, amp.loss_scale=dynamic: mrpe 120.5 (); the best of 2 "
                     "rows, from amp.dtype=fp16</title>"),
            std::string::npos)
      << svg;
  const size_t none = svg.find("data-row=\"O1\" data-column=\"128\"");
  EXPECT_EQ(svg.find(std::string("fill=\"") + app::kHeatNoValue + "\"", none),
            svg.find("fill=\"", none));
  EXPECT_EQ(count(svg, "<rect class=\"answer\""), 1u);
  EXPECT_NE(svg.find("; the tune search's answer</title>"), std::string::npos);
  // The key: the scale from the worst to the best value, and what the map has.
  EXPECT_NE(svg.find(">300 worst</text>"), std::string::npos);
  EXPECT_NE(svg.find(">best 100</text>"), std::string::npos);
  for (const char* word : {">no value yet<", ">pruned<", ">tune answer<", ">not in the sweep<"}) {
    EXPECT_NE(svg.find(word), std::string::npos) << word;
  }
  EXPECT_EQ(svg.find(">diverged<"), std::string::npos);  // no cell diverged
  EXPECT_NE(svg.find("<figcaption>Rows amp.opt_level, columns amp.loss_scale"), std::string::npos);
}

TEST(SvgHeatmap, KeysAndValuesFromTheDatabaseAreEscaped) {
  app::HeatMap map = model();
  const std::string evil = "<script>alert(1)</script>\"'\nx";
  map.y_key = "k" + evil;
  map.x_values[0] = evil;
  map.cells[0].others = "c=" + evil;
  map.cells[0].status = evil;
  map.metric = evil;
  const std::string svg = svg_heatmap("heatmap", map, 1);
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_EQ(svg.find("\"'\nx"), std::string::npos);
  EXPECT_NE(svg.find("data-column=\"&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;\nx\""),
            std::string::npos);
  EXPECT_NE(svg.find(">k&lt;script&gt;"), std::string::npos);
}

class HeatmapPageTest : public app::AppTest {};

TEST_F(HeatmapPageTest, TheSweepPageDrawsTheHeatmapsBelowTheTable) {
  for (int i = 0; i < 4; ++i) {
    Run run;
    run.cell = i;
    run.axes = nlohmann::json{{"optim.lr", i / 2 ? 0.2 : 0.1}, {"seed", i % 2}}.dump();
    const int64_t id = add_run(run);
    add_epochs(id, "acc1", {10.0 + i});
    finish(id);
  }
  const Page page = render_page(path_, "/sweep/grid");
  ASSERT_EQ(page.status, 200) << page.body;
  const size_t table = page.body.find("<h2>Comparison</h2>");
  const size_t heatmaps = page.body.find("<h2>acc1 per pair of swept keys</h2>");
  const size_t figure = page.body.find("data-plot=\"heatmap\"><svg");
  const size_t runs = page.body.find("<h2>Runs</h2>");
  EXPECT_LT(table, heatmaps);
  EXPECT_LT(heatmaps, figure);
  EXPECT_LT(figure, runs);
  EXPECT_NE(runs, std::string::npos);
  EXPECT_NE(page.body.find("aria-label=\"acc1 (best epoch): optim.lr x seed\""), std::string::npos);
  EXPECT_EQ(count(page.body, "<g class=\"cell\""), 4u);
  EXPECT_NE(page.body.find(">13</text>"), std::string::npos);
}

}  // namespace
}  // namespace amptune::web
