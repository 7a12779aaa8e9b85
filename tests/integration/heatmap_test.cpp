// The heatmaps (app/views/heatmap.h) through the binary: experiments/amp_grid.yaml's 14 cells as
// runs of a database written through the Store API (made-up results: no training, seconds), with
// a pruned, a diverged and a failed cell and an answered tune search; `amptune report` draws a PNG
// per pair of swept keys with gnuplot, and `amptune serve`'s sweep page, loaded by headless
// Chromium (Debian's chromium, as tests/integration/serve_test.cpp), has the heatmaps in its DOM:
// the cells of opt_level x loss_scale in the sweep's order with the table's values, the marks and
// the answer. A sweep whose key values hold <script>, quotes and a line break runs no script.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <thread>

#include "core/sweep.h"
#include "integration/harness.h"
#include "support/amp_grid.h"

namespace amptune::testing {
namespace {

namespace fs = std::filesystem;
using records::RunStatus;

// acc1 of cell `i` at its two epochs; the best (the compare table's default) is their maximum.
std::pair<double, double> acc1_of(int i) { return {40.0 + i, 50.0 + 3 * ((i * 7) % 11)}; }

int64_t add_run(store::Store& store, const std::string& sweep, int cell, const std::string& axes) {
  records::RunSpec spec;
  spec.sweep_name = sweep;
  spec.cell_index = cell;
  spec.label = axes;
  spec.config_json = R"({"schedule":{"epochs":2}})";
  spec.config_hash = std::to_string(10000000 + cell) + sweep;
  spec.axes_json = axes;
  return store.ensure_run(store.ensure_sweep(sweep, "", "", ""), spec).id;
}

void add_epochs(store::Store& store, int64_t run, const std::vector<double>& acc1) {
  for (size_t e = 0; e < acc1.size(); ++e) {
    records::EpochRecord record;
    record.run_id = run;
    record.epoch = static_cast<int>(e);
    record.global_step = 10 * (static_cast<int64_t>(e) + 1);
    record.train_loss = 1;
    record.train_fps_mean = record.train_fps_min = record.train_fps_max = 100;
    record.epoch_seconds = 1;
    record.metrics["acc1"] = acc1[e];
    store.record_epoch(record);
  }
}

// amp_grid's cells with made-up acc1: cell 4 (fp16 O1 128) pruned, 7 (fp16 O2 128) diverged, 11
// (fp16 O3 1) failed; a tune search answered by cell 12 (bf16 O1 dynamic). And the sweep "evil":
// two cells whose key values would break out of a page or a script.
void write_database(const std::string& db) {
  store::Store store(db);
  const Sweep sweep = load_sweep(AMPTUNE_SOURCE_DIR "/experiments/amp_grid.yaml");
  ASSERT_EQ(sweep.cells.size(), 14u);
  std::vector<int64_t> ids;
  for (const Cell& cell : sweep.cells) {
    const int64_t id = add_run(store, "amp_grid", cell.index, cell.axes.dump());
    ids.push_back(id);
    add_epochs(store, id, {acc1_of(cell.index).first, acc1_of(cell.index).second});
    settle_amp_grid_cell(store, id, cell.index);
  }
  add_amp_grid_search(store, ids);
  const std::string evil = "<script>document.title='pwned'</script>\"'\nx";
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json axes = {{"k<script>document.title='pwned'</script>", i ? "plain" : evil},
                                 {"n", evil}};
    const int64_t id = add_run(store, "evil", i, axes.dump());
    add_epochs(store, id, {1.0 + i});
    store.finish_run(id, RunStatus::kDone, "", "{}");
  }
}

std::string built_db() {
  const std::string dir = scratch_dir();
  const std::string db = dir + "/results.sqlite";
  write_database(db);
  return db;
}

TEST(HeatmapCli, TheReportDrawsAPngPerPairOfAmpGridsKeys) {
  const std::string db = built_db();
  const std::string dir = fs::path(db).parent_path().string();
  const Result r =
      run_amptune({"report", "--db", db, "--sweep", "amp_grid", "--out", dir + "/report"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string html = read_file(dir + "/report/index.html");
  EXPECT_NE(html.find("<h2>acc1 (best epoch): amp.opt_level x amp.loss_scale</h2>\n"
                      "<img src=\"heatmap_3.png\""),
            std::string::npos)
      << html;
  for (const char* png : {"heatmap_1.png", "heatmap_2.png", "heatmap_3.png"}) {
    EXPECT_EQ(read_file(dir + "/report/" + png).substr(0, 8), "\x89PNG\r\n\x1a\n") << png;
  }
}

// --- a real browser (as serve_test.cpp) --------------------------------------------------------

std::string chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

// `amptune serve` on a free port of `db`; its port from the line it prints (0: none).
int start_server(const std::string& db, const std::string& dir, pid_t* pid) {
  *pid = spawn_amptune({"serve", "--db", db, "--port", "0"}, dir, SpawnOptions({}, "serve"));
  const std::regex line(R"(on http://127\.0\.0\.1:(\d+)/)");
  for (int i = 0; i < 600; ++i) {
    std::smatch m;
    const std::string out = read_file(dir + "/serve.out");
    if (std::regex_search(out, m, line)) return std::stoi(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

// The DOM of `url` after its scripts ran, as headless Chromium dumps it.
std::string dom_of(const std::string& dir, const std::string& stem, const std::string& url) {
  const pid_t pid = spawn_program({chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                                   "--no-first-run", "--user-data-dir=" + dir + "/chromium-" + stem,
                                   "--virtual-time-budget=3000", "--dump-dom", url},
                                  dir, SpawnOptions({}, stem));
  StopOnExit stop(pid);
  EXPECT_EQ(wait_exit_code(pid, 120), 0) << read_file(dir + "/" + stem + ".err");
  return read_file(dir + "/" + stem + ".out");
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

TEST(HeatmapBrowser, ChromiumShowsAmpGridsHeatmapsWithTheTablesValues) {
  ASSERT_FALSE(chromium().empty()) << "the browser test needs Debian's chromium (tools/test.sh "
                                      "installs it: apt install chromium)";
  const std::string db = built_db();
  const std::string dir = fs::path(db).parent_path().string();
  pid_t pid = -1;
  const int port = start_server(db, dir, &pid);
  StopOnExit stop(pid);
  ASSERT_NE(port, 0) << read_file(dir + "/serve.err");
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  const std::string dom = dom_of(dir, "dom", base + "/sweep/amp_grid");
  size_t figures = 0;
  for (size_t at = dom.find("data-plot=\"heatmap\"><svg"); at != std::string::npos;
       at = dom.find("data-plot=\"heatmap\"><svg", at + 1)) {
    ++figures;
  }
  EXPECT_EQ(figures, 3u) << dom.substr(0, 3000);
  const size_t map = dom.find("aria-label=\"acc1 (best epoch): amp.opt_level x amp.loss_scale\"");
  ASSERT_NE(map, std::string::npos) << dom.substr(0, 3000);
  const std::string svg = dom.substr(map, dom.find("</svg>", map) - map);
  // The rows and columns in the sweep's order.
  std::vector<size_t> rows, columns;
  for (const char* v : {">O0<", ">O1<", ">O2<", ">O3<"}) rows.push_back(svg.find(v));
  for (const char* v : {">dynamic<", ">128.0<", ">1.0<"}) columns.push_back(svg.find(v));
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()) && rows.back() != std::string::npos);
  EXPECT_TRUE(std::is_sorted(columns.begin(), columns.end()) &&
              columns.back() != std::string::npos);
  // Each fp16 cell's value (the best epoch's; bf16 only adds O1 and O2 x dynamic, below) and mark.
  const char* opt[] = {"O0", "O1", "O2", "O3"};
  const char* scale[] = {"dynamic", "128.0", "1.0"};
  for (int i = 0; i < 12; ++i) {
    const auto best_of = [](int c) { return std::max(acc1_of(c).first, acc1_of(c).second); };
    double best = best_of(i);
    if (i == 3 || i == 6) best = std::max(best, best_of(i == 3 ? 12 : 13));  // bf16's too
    const std::string mark = i == 4 ? "pruned" : i == 7 ? "diverged" : i == 11 ? "failed" : "";
    const std::string cell = "<g class=\"cell\" data-row=\"" + std::string(opt[i / 3]) +
                             "\" data-column=\"" + scale[i % 3] + "\" data-mark=\"" + mark + "\">";
    const size_t at = svg.find(cell);
    ASSERT_NE(at, std::string::npos) << cell;
    EXPECT_NE(svg.find(">" + number(best) + "</text>", at), std::string::npos) << cell;
    if (!mark.empty()) {
      EXPECT_NE(svg.find(">" + mark + "</text>", at), std::string::npos) << cell;
    }
  }
  EXPECT_NE(svg.find("class=\"answer\""), std::string::npos);  // bf16 O1 dynamic
  EXPECT_NE(svg.find("the tune search's answer</title>"), std::string::npos);
  // Values and keys from the database are text, never markup: the page runs no script of them.
  const std::string evil = dom_of(dir, "evil", base + "/sweep/evil");
  EXPECT_NE(evil.find("<title>amptune: sweep evil</title>"), std::string::npos) << evil;
  EXPECT_EQ(evil.find("pwned</title>"), std::string::npos);
  EXPECT_NE(evil.find("data-plot=\"heatmap\"><svg"), std::string::npos);
  EXPECT_NE(evil.find("&lt;script&gt;document.title="), std::string::npos);
}

}  // namespace
}  // namespace amptune::testing
