// Unit tests of the live view's pages (web/pages.h) and plots (web/svg.h, app/views/plot_axes.h): a
// handful of ticks on a log2 axis however wide the range, every value from the database escaped,
// each route's page and status from a real SQLite database, and that the view cannot write it.
#include "web/pages.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "app/views/inspect.h"
#include "app/views/plot_axes.h"
#include "app/views/report.h"
#include "app/views/report_plots.h"
#include "core/error.h"
#include "core/process.h"
#include "unit/app/app_fixture.h"
#include "web/svg.h"

namespace amptune::web {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> labels(const std::vector<app::Tick>& ticks) {
  std::vector<std::string> out;
  for (const auto& t : ticks) out.push_back(t.label);
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(PlotAxes, ALossScaleFrom2To13DownTo2ToMinus31GetsAHandfulOfTicks) {
  // The field's case: the scale fell from 2^13 to 2^-31; every power of two would be 45 labels.
  const auto ticks = app::log2_ticks(std::ldexp(1.0, -31), std::ldexp(1.0, 13));
  EXPECT_EQ(labels(ticks),
            (std::vector<std::string>{"2^-32", "2^-24", "2^-16", "2^-8", "2^0", "2^8", "2^16"}));
  EXPECT_EQ(ticks.front().value, std::ldexp(1.0, -32));
  EXPECT_EQ(ticks.back().value, 65536.0);
  // A narrow range keeps every power; one value gets a tick on each side.
  EXPECT_EQ(labels(app::log2_ticks(32768, 65536)), (std::vector<std::string>{"2^15", "2^16"}));
  EXPECT_EQ(labels(app::log2_ticks(65536, 65536)),
            (std::vector<std::string>{"2^15", "2^16", "2^17"}));
  EXPECT_EQ(labels(app::log10_ticks(1e-12, 0.5)),
            (std::vector<std::string>{"1e-12", "1e-10", "1e-08", "1e-06", "0.0001", "0.01", "1"}));
}

TEST(PlotAxes, LinearTicksAreRoundNumbersCoveringTheRange) {
  // The step is the first of 1, 2, 5 x 10^k at least (hi - lo) / 5: 0.248 -> 0.5.
  EXPECT_EQ(labels(app::linear_ticks(0.07, 1.31)),
            (std::vector<std::string>{"0", "0.5", "1", "1.5"}));
  EXPECT_EQ(labels(app::linear_ticks(75, 100)),
            (std::vector<std::string>{"75", "80", "85", "90", "95", "100"}));
  EXPECT_EQ(labels(app::linear_ticks(-0.3, 0.3)),  // 0.12 -> 0.2; zero printed as 0
            (std::vector<std::string>{"-0.4", "-0.2", "0", "0.2", "0.4"}));
  EXPECT_FALSE(app::linear_ticks(5, 5).empty());  // one value: an axis around it
}

TEST(Svg, ALinePlotEscapesItsTextAndMarksEachPointWithItsValue) {
  LinePlot plot("loss", "loss <b>", "epoch", "loss & more");
  plot.series.push_back(
      {"<script>alert(1)</script>", "/run/1\"><x", {{0, 2.5}, {1, NAN}, {2, 0.125}}, -1});
  const std::string svg = svg_line_plot(plot);
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(svg.find("href=\"/run/1&quot;&gt;&lt;x\""), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 2u);  // the NaN is left out
  EXPECT_NE(svg.find("epoch 0: 2.5</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("epoch 2: 0.125</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-plot=\"loss\""), std::string::npos);
}

TEST(Svg, ALog2AxisLabelsPowersOfTwoAndAPlotWithoutPointsSaysSo) {
  LinePlot plot("loss_scale", "loss scale", "global step", "loss scale (log2)", Scale::kLog2, true);
  plot.series.push_back({"run", "", {{0, 8192}, {10, std::ldexp(1.0, -31)}, {20, 0}}, 3});
  const std::string svg = svg_line_plot(plot);
  EXPECT_EQ(count(svg, "<tspan"), 7u) << svg;  // 2^-32 ... 2^16, every 8 powers
  EXPECT_NE(svg.find("2<tspan dy=\"-6\" font-size=\"9\">-32</tspan>"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 2u);  // 0 has no place on a log axis
  LinePlot empty("metric", "acc1 per epoch", "epoch", "acc1");
  empty.series.push_back({"run", "", {}, -1});
  EXPECT_NE(svg_line_plot(empty).find("acc1 per epoch: no data yet"), std::string::npos);
}

TEST(Pages, PercentDecodingRefusesMalformedAndNulBytes) {
  EXPECT_EQ(percent_decoded("a%20b%2Fc"), "a b/c");
  EXPECT_EQ(percent_decoded("%zz"), std::nullopt);
  EXPECT_EQ(percent_decoded("abc%4"), std::nullopt);
  EXPECT_EQ(percent_decoded("a%00b"), std::nullopt);
}

class PagesTest : public app::AppTest {
 protected:
  void add_sweep() {
    Run grid;
    grid.axes = R"({"optim.lr":0.1})";
    grid.columns = {{"opt_level", "\"O1\""}};
    run_ = add_run(grid);
    Epoch e;
    e.metrics["acc1"] = 0.5;
    e.scale_events = {{0, 65536, ScaleReason::kInit}, {5, 32768, ScaleReason::kOverflow}};
    add_epoch(run_, 0, e);
    e.metrics["acc1"] = 0.625;
    e.scale_events.clear();
    add_epoch(run_, 1, e);
    finish(run_);
    // A sweep named and labelled to break out of the page, as a merged database could hold.
    Run evil;
    evil.sweep = "<img src=x onerror=alert(1)>";
    evil.label = "\"><script>alert(2)</script>";
    evil_ = add_run(evil);
  }
  Page get(const std::string& target) { return render_page(path_, target); }
  int64_t run_ = 0, evil_ = 0;
};

TEST_F(PagesTest, EachPageShowsWhatTheDatabaseHolds) {
  add_sweep();
  const Page index = get("/");
  EXPECT_EQ(index.status, 200);
  EXPECT_NE(index.body.find("<a href=\"/sweep/grid\">grid</a>"), std::string::npos);
  const Page sweep = get("/sweep/grid");
  ASSERT_EQ(sweep.status, 200) << sweep.body;
  EXPECT_NE(sweep.body.find("<th>acc1</th>"), std::string::npos);  // the comparison table
  EXPECT_NE(sweep.body.find("<td>0.625</td>"), std::string::npos);
  EXPECT_NE(sweep.body.find("href=\"/run/" + std::to_string(run_) + "\""), std::string::npos);
  for (const char* plot : {"metric", "train_loss", "loss_scale", "throughput"}) {
    EXPECT_NE(sweep.body.find(std::string("data-plot=\"") + plot + "\"><svg"), std::string::npos)
        << plot;
  }
  const Page run = get("/run/" + std::to_string(run_));
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_NE(run.body.find("<td>1.75</td>"), std::string::npos);           // epoch 1's train loss
  EXPECT_NE(run.body.find("epoch 1: 0.625</title>"), std::string::npos);  // the metric's curve
  EXPECT_NE(run.body.find("global step 5: 32768</title>"), std::string::npos);
  // The pages draw the plots of the report's list (app/views/report_plots.h) that name them, and no
  // other: a plot added to the list appears here without a change to the pages.
  const auto figure = [](const std::string& id) { return "data-plot=\"" + id + "\""; };
  for (const app::PlotDef& def : app::report_plots()) {
    // (A heatmap needs two swept keys, this sweep has one: tests/unit/web/heatmap_test.cpp.)
    EXPECT_EQ(sweep.body.find(figure(def.id)) != std::string::npos,
              (def.places & app::kOnSweepPage) != 0 && def.data != app::PlotData::kHeatmaps)
        << def.id;
    // No run here was diagnosed: its page has no module errors (the test below shows them).
    EXPECT_EQ(run.body.find(figure(def.id)) != std::string::npos,
              (def.places & app::kOnRunPage) != 0 && def.x != app::PlotX::kModule)
        << def.id;
  }
  EXPECT_NE(sweep.body.find(">acc1 per epoch</text>"), std::string::npos);  // the list's title
  const Page tune = get("/sweep/grid/tune");
  EXPECT_EQ(tune.status, 200);
  EXPECT_NE(tune.body.find("has no tune search"), std::string::npos);
  // The live part is the <main> element's content alone.
  const Page live = get("/run/" + std::to_string(run_) + "?part=live");
  EXPECT_EQ(live.body.find("<html"), std::string::npos);
  EXPECT_NE(run.body.find("<main id=\"live\">" + live.body + "</main>"), std::string::npos);
}

TEST_F(PagesTest, ARunPageNamesItsDiagnosedModulesAndATunePageDrawsItsTree) {
  add_sweep();
  records::Diagnosis d;
  d.run_id = run_;
  d.epoch = 1;
  d.batches = 1;
  for (int seq = 0; seq < 3; ++seq) {
    records::DiagnosticRow r;
    r.kind = records::DiagnosticKind::kForward;
    r.seq = seq;
    r.module = seq == 1 ? "layer1.0.conv2" : "m" + std::to_string(seq);
    r.dtype = TensorDtype::kFp16;
    r.numel = 8;
    r.cosine = seq == 1 ? 0.5 : 1.0;
    d.rows.push_back(r);
  }
  store_.record_diagnosis(d);
  const Page run = get("/run/" + std::to_string(run_));
  EXPECT_NE(run.body.find(">layer1.0.conv2</text>"), std::string::npos);  // named on the axis
  EXPECT_NE(run.body.find("first module that departs: <b>layer1.0.conv2</b>"), std::string::npos)
      << run.body;
  EXPECT_NE(run.body.find("<line class=\"mark\""), std::string::npos);
  EXPECT_NE(run.body.find("data-plot=\"module_error\"><svg"), std::string::npos);
  Run other;
  other.cell = 1;
  other.label = "r1 loss_scale";
  const int64_t candidate = add_run(other);
  add_epochs(candidate, "acc1", {0.5, 0.6});
  records::TuneSearchRow search;
  search.sweep_id = store_.find_run(run_)->sweep_id;
  search.block_json = "{}";
  search.metric = "acc1";
  search.reference_run_id = run_;
  search.start_run_id = run_;
  search = store_.ensure_tune_search(search);
  store_.record_tune_round({search.id, 1, records::TuneRoundKind::kSearch, run_, -1, -1, ""});
  records::TuneCandidateRow c;
  c.search_id = search.id;
  c.round = 1;
  c.move = TuneMoveKind::kLossScale;
  c.change_json = R"({"amp.loss_scale":"dynamic"})";
  c.reason = "overflow <in conv1>";
  c.run_id = candidate;
  c.outcome = records::CandidateOutcome::kWithin;
  c.value = 0.6;
  store_.record_tune_candidate(c);
  const Page tune = get("/sweep/grid/tune");
  ASSERT_EQ(tune.status, 200);
  EXPECT_NE(tune.body.find("<ul class=\"tree\">"), std::string::npos) << tune.body;
  EXPECT_NE(tune.body.find("round 1: loss_scale"), std::string::npos) << tune.body;
  EXPECT_NE(tune.body.find("title=\"overflow &lt;in conv1&gt;\""), std::string::npos);
  EXPECT_NE(
      tune.body.find("class=\"node within\"><a href=\"/run/" + std::to_string(candidate) + "\">"),
      std::string::npos)
      << tune.body;
  // The search's curves, titled by the plot list: a search without an answer has a closest run.
  EXPECT_NE(tune.body.find("data-plot=\"tune_curves\"><svg"), std::string::npos) << tune.body;
  EXPECT_NE(
      tune.body.find(">acc1 of the tune search&#39;s reference, start and closest run</text>"),
      std::string::npos);
  EXPECT_NE(get("/sweep/grid").body.find("/sweep/grid/tune\">Tune search: searching</a>"),
            std::string::npos);
}

// The report plots the first kMaxPlottedRuns runs of a sweep; a run page has its own curves
// whatever the run's place.
TEST_F(PagesTest, ARunPastTheReportsPlottedRunsHasItsCurves) {
  int64_t last = 0;
  for (int cell = 0; cell <= static_cast<int>(app::kMaxPlottedRuns); ++cell) {
    Run run;
    run.cell = cell;
    run.axes = "{\"seed\":" + std::to_string(cell) + "}";
    last = add_run(run);
    Epoch e;
    e.metrics["acc1"] = 0.25 + cell / 1000.0;
    e.scale_events = {{0, 1024, ScaleReason::kInit}};
    add_epoch(last, 0, e);
  }
  const Page run = get("/run/" + std::to_string(last));
  ASSERT_EQ(run.status, 200);
  EXPECT_NE(run.body.find("epoch 0: 0.31</title>"), std::string::npos) << run.body;
  EXPECT_NE(run.body.find("global step 10: 1024</title>"), std::string::npos);  // held to its step
  EXPECT_EQ(run.body.find("no data yet"), std::string::npos);
}

TEST_F(PagesTest, ValuesFromTheDatabaseAreEscapedEverywhere) {
  add_sweep();
  const std::string encoded = "/sweep/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E";
  for (const std::string& target : {std::string("/"), encoded, "/run/" + std::to_string(evil_)}) {
    const Page page = get(target);
    ASSERT_EQ(page.status, 200) << target << page.body;
    EXPECT_EQ(page.body.find("<img"), std::string::npos) << target;
    EXPECT_EQ(page.body.find("<script>alert"), std::string::npos) << target;
  }
  EXPECT_NE(
      get("/").body.find("href=\"" +
                         std::string("/sweep/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E") + "\""),
      std::string::npos);
}

TEST_F(PagesTest, UnknownMalformedAndUnreadableAreErrorPages) {
  add_sweep();
  EXPECT_EQ(get("/sweep/nope").status, 404);
  EXPECT_NE(get("/sweep/nope").body.find("nope"), std::string::npos);
  EXPECT_EQ(get("/run/99999").status, 404);
  EXPECT_EQ(get("/run/1x").status, 404);
  EXPECT_EQ(get("/etc/passwd").status, 404);
  EXPECT_EQ(get("/sweep/%zz").status, 400);
  EXPECT_EQ(render_page((dir_.path() / "missing.sqlite").string(), "/").status, 503);
  const std::string other = dir_.write("other.sqlite", "not a database at all, just text\n");
  const Page page = render_page(other, "/");
  EXPECT_EQ(page.status, 503);
  EXPECT_NE(page.body.find("other.sqlite"), std::string::npos) << page.body;
}

// A sweep of more runs than a page: kPageRows of them, a link to the next page, and the next
// page holds the rest; a row number that is not one is a malformed address.
TEST_F(PagesTest, ASweepOfMoreRunsThanAPageIsPaged) {
  int64_t last = 0;
  for (int cell = 0; cell < static_cast<int>(kPageRows) + 20; ++cell) {
    Run run;
    run.cell = cell;
    run.axes = "{\"seed\":" + std::to_string(cell) + "}";
    last = add_run(run);
  }
  const Page first = get("/sweep/grid");
  ASSERT_EQ(first.status, 200) << first.body.substr(0, 400);
  EXPECT_NE(first.body.find("Runs 1-500 of 520."), std::string::npos);
  EXPECT_NE(first.body.find("<a href=\"/sweep/grid?from=500\">next 500</a>"), std::string::npos);
  EXPECT_EQ(first.body.find("href=\"/run/" + std::to_string(last) + "\""), std::string::npos);
  EXPECT_NE(first.body.find("The best 500 of 520 rows"), std::string::npos);  // the comparison
  const Page next = get("/sweep/grid?from=500");
  EXPECT_NE(next.body.find("Runs 501-520 of 520."), std::string::npos);
  EXPECT_NE(next.body.find("href=\"/run/" + std::to_string(last) + "\""), std::string::npos);
  EXPECT_NE(next.body.find("<a href=\"/sweep/grid?from=0\">previous 500</a>"), std::string::npos);
  EXPECT_EQ(get("/sweep/grid?from=-1").status, 400);
  EXPECT_EQ(get("/sweep/grid?from=99999999999").status, 400);
}

// A run of many metrics: its epochs table has the first kPageMetrics by name, and says where
// the rest are (the table was every metric's, found by a search per epoch and metric).
TEST_F(PagesTest, ARunOfManyMetricsShowsAPageOfThemAndSaysSo) {
  const int64_t run = add_run(Run{});
  for (int epoch = 0; epoch < 3; ++epoch) {
    Epoch e;
    for (int m = 0; m < 150; ++m) {
      char name[16];
      std::snprintf(name, sizeof name, "m%03d", m);
      e.metrics[name] = epoch + m / 1000.0;
    }
    add_epoch(run, epoch, e);
  }
  const Page page = get("/run/" + std::to_string(run));
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<th>m099</th>"), std::string::npos);
  EXPECT_EQ(page.body.find("<th>m100</th>"), std::string::npos);
  EXPECT_NE(page.body.find("The first 100 of 150 metrics (by name); <code>amptune show " +
                           std::to_string(run) + "</code>"),
            std::string::npos);
}

// A page rendered under a WorkBound stops at it: past its deadline, or once its client is gone
// (web/server.h answers 503, or nothing).
TEST_F(PagesTest, APageStopsAtItsWorkBound) {
  add_sweep();
  for (const std::string& target : {std::string("/"), std::string("/sweep/grid"),
                                    "/run/" + std::to_string(run_)}) {
    WorkBound late(std::chrono::steady_clock::now(), nullptr);
    try {
      get(target);
      ADD_FAILURE() << target << " went on past its deadline";
    } catch (const WorkAbandoned& e) {
      EXPECT_TRUE(e.timed_out());
    }
  }
  WorkBound gone(std::chrono::steady_clock::now() + std::chrono::hours(1), [] { return true; });
  try {
    get("/sweep/grid");
    ADD_FAILURE() << "the page went on for a client that left";
  } catch (const WorkAbandoned& e) {
    EXPECT_FALSE(e.timed_out());
  }
}

// The live part is polled less when it is slow, not while the tab is hidden, and less after
// failures (the browser runs it: serve_cli_test's ServeBrowser).
TEST_F(PagesTest, TheLiveScriptBacksOff) {
  add_sweep();
  const std::string page = get("/").body;
  EXPECT_NE(page.find("if (document.hidden) return;"), std::string::npos);
  EXPECT_NE(page.find("addEventListener('visibilitychange'"), std::string::npos);
  EXPECT_NE(page.find("Math.max(2000, 5 * (Date.now() - start))"), std::string::npos);
  EXPECT_NE(page.find("Math.min(60000, 2000 * Math.pow(2, failures))"), std::string::npos);
}

TEST_F(PagesTest, TheViewCannotWriteTheDatabase) {
  add_sweep();
  const auto read_only = app::open_read_only(path_);
  EXPECT_THROW(read_only->ensure_sweep("new", "", "", ""), StoreError);
  const auto bytes = [&] {  // the database and its write-ahead log
    std::string all;
    for (const std::string& file : {path_, path_ + "-wal"}) {
      std::ifstream in(file, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      all += text.str() + "|";
    }
    return all;
  };
  const std::string before = bytes();
  for (const char* target : {"/", "/sweep/grid", "/run/1", "/sweep/grid/tune"}) get(target);
  EXPECT_EQ(bytes(), before);
}

}  // namespace
}  // namespace amptune::web
