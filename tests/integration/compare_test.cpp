// End-to-end tests of the query side of the results database: `amptune status`, `compare` and
// `report` on a tiny sweep (2 learning rates x 2 seeds, 2 epochs) trained once by the real binary.
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/harness.h"
#include "core/process.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

struct Sweep {
  std::string dir, db;
};

// Trains the sweep once for every test of this file.
const Sweep& trained() {
  static const Sweep sweep = [] {
    const TinySweep tiny =
        make_tiny_sweep(quick_tiny("grid:\n  optim.lr: [0.05, 0.2]\n  seed: [1, 2]\n", 2));
    Sweep s;
    s.dir = tiny.dir;
    s.db = s.dir + "/results.sqlite";
    auto r = run_amptune({"run", s.dir + "/sweep.yaml", "--db", s.db}, s.dir);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return s;
  }();
  return sweep;
}

// A fresh directory next to the trained sweep (scratch_dir() is one directory per test and
// starts empty, so the checks of one test share it through subdirectories).
std::string sub_dir(const std::string& name) {
  const std::string dir = trained().dir + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Parses RFC 4180 CSV (quoted fields, "" escapes, CRLF line ends).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      row.push_back(field);
      rows.push_back(row);
      row.clear();
      field.clear();
      ++i;
    } else {
      field += c;
    }
  }
  EXPECT_TRUE(field.empty() && row.empty()) << "CSV does not end with CRLF";
  return rows;
}

// Best (highest) acc1 of each run, keyed by its (lr, seed), read with the Store API.
std::map<std::pair<double, int>, std::pair<double, int>> best_acc1(const std::string& db) {
  store::Store store(db);
  std::map<std::pair<double, int>, std::pair<double, int>> best;
  for (const auto& run : store.runs("tiny")) {
    auto axes = json::parse(run.axes_json);
    double value = -1;
    int epoch = -1;
    for (const auto& e : store.epochs(run.id)) {
      if (e.metrics.at("acc1") > value) {
        value = e.metrics.at("acc1");
        epoch = e.epoch;
      }
    }
    best[{axes.at("optim.lr").get<double>(), axes.at("seed").get<int>()}] = {value, epoch};
  }
  return best;
}

void StatusCountsRunsAndFlagsAStaleWorker() {
  const Sweep& s = trained();
  for (const char* command : {"status", "compare", "report"}) {
    auto help = run_amptune({command, "--help"}, s.dir);
    EXPECT_EQ(help.exit_code, 0) << command << help.err;
    EXPECT_NE(help.out.find(std::string("usage: amptune ") + command), std::string::npos) << command;
  }
  auto r = run_amptune({"status", "--db", s.db}, s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sweep tiny: 4 runs: done 4, running 0, pending 0, failed 0, diverged 0"),
            std::string::npos)
      << r.out;

  // A copy of the database with one more run that is running (fresh heartbeat, then a stale one).
  const std::string dir = sub_dir("status");
  const std::string db = dir + "/copy.sqlite";
  fs::copy_file(s.db, db);
  int64_t id = 0;
  {
    store::Store store(db);
    const int64_t sweep_id = store.ensure_sweep("tiny", "", "", "");
    records::RunSpec spec;
    spec.sweep_name = "tiny";
    spec.cell_index = 4;
    spec.label = "optim.lr=0.9 seed=1";
    spec.config_json = R"({"schedule": {"epochs": 5}})";
    spec.config_hash = "feedfacefeedface";
    spec.axes_json = R"({"optim.lr": 0.9, "seed": 1})";
    id = store.ensure_run(sweep_id, spec).id;
    store.mark_running(id, records::Provenance{});
  }
  r = run_amptune({"status", "--db", db, "--sweep", "tiny"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("5 runs: done 4, running 1, pending 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0/5"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("stale"), std::string::npos) << r.out;

  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  // Held by this (live) test process: an old heartbeat alone means hung, not dead.
  std::string update = "UPDATE runs SET heartbeat_at = '2000-01-01T00:00:00.000Z' WHERE id = " +
                       std::to_string(id);
  EXPECT_EQ(sqlite3_exec(raw, update.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  r = run_amptune({"status", "--db", db}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("lives: hung?"), std::string::npos) << r.out;
  // Held by a process of another host: the heartbeat decides.
  update = "UPDATE runs SET claim_machine = 'another-host' WHERE id = " + std::to_string(id);
  EXPECT_EQ(sqlite3_exec(raw, update.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  r = run_amptune({"status", "--db", db}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("stale (worker died?)"), std::string::npos) << r.out;
  // Held by a process of this host that is gone: stale whatever the heartbeat.
  update = "UPDATE runs SET claim_machine = '" + current_process().machine +
           "', claim_pid = 2147483600, heartbeat_at = '2999-01-01T00:00:00.000Z' WHERE id = " +
           std::to_string(id);
  EXPECT_EQ(sqlite3_exec(raw, update.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  r = run_amptune({"status", "--db", db}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("stale (its process 2147483600 is gone)"), std::string::npos) << r.out;

  r = run_amptune({"status", "--db", db, "--sweep", "nope"}, dir);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
}

void CsvHasOneRowPerLrWithTheMeanBestMetric() {
  const Sweep& s = trained();
  const auto best = best_acc1(s.db);
  ASSERT_EQ(best.size(), 4u);
  auto r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr",
                        "--format", "csv"},
                       s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  const auto& header = rows[0];
  auto column = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name << " missing in " << r.out;
    return static_cast<size_t>(it - header.begin());
  };
  std::set<double> lrs;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ASSERT_EQ(row.size(), header.size());
    const double lr = std::stod(row[column("optim.lr")]);
    lrs.insert(lr);
    EXPECT_EQ(row[column("runs")], "2");
    const double expected = (best.at({lr, 1}).first + best.at({lr, 2}).first) / 2;
    EXPECT_EQ(std::stod(row[column("acc1")]), expected) << "lr " << lr;
    EXPECT_EQ(row[column("status")], "done");
    EXPECT_FALSE(row[column("img_s")].empty());
  }
  EXPECT_EQ(lrs, (std::set<double>{0.05, 0.2}));
  // Best first: rank 1 has the larger value.
  EXPECT_EQ(rows[1][column("rank")], "1");
  EXPECT_GE(std::stod(rows[1][column("acc1")]), std::stod(rows[2][column("acc1")]));

  // One row per cell with two keys: each run's own best value and epoch.
  r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr,seed",
                   "--format", "csv"},
                  s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& cell = best.at({std::stod(rows[i][0]), std::stoi(rows[i][1])});
    EXPECT_EQ(std::stod(rows[i][3]), cell.first) << r.out;
    EXPECT_EQ(std::stoi(rows[i][4]), cell.second) << r.out;  // best_epoch
  }
}

void EpochLastAndNTakeThatEpochsValue() {
  const Sweep& s = trained();
  store::Store store(s.db);
  std::map<std::string, std::vector<records::EpochRow>> epochs;  // label -> epochs
  for (const auto& run : store.runs("tiny")) epochs[run.label] = store.epochs(run.id);
  for (const std::string epoch : {"0", "last"}) {
    auto r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr,seed",
                          "--epoch", epoch, "--format", "json"},
                         s.dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json rows = json::parse(r.out);
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& row : rows) {
      std::ostringstream label;
      label << "optim.lr=" << row.at("optim.lr").dump() << " seed=" << row.at("seed").dump();
      ASSERT_TRUE(epochs.count(label.str())) << label.str();
      const auto& e = epochs.at(label.str());
      const auto& picked = epoch == "0" ? e.front() : e.back();
      EXPECT_EQ(row.at("acc1").get<double>(), picked.metrics.at("acc1")) << label.str();
      EXPECT_EQ(row.at("epoch").get<int>(), picked.epoch);
    }
  }
}

void JsonAndBaselineDelta() {
  const Sweep& s = trained();
  auto r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr",
                        "--format", "json", "--baseline", "optim.lr=0.05"},
                       s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json rows = json::parse(r.out);
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 2u);
  double base = 0;
  for (const auto& row : rows) {
    if (row.at("optim.lr").get<double>() == 0.05) base = row.at("acc1").get<double>();
  }
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("runs").get<int>(), 2);
    const double delta = row.at("delta").get<double>();
    if (row.at("optim.lr").get<double>() == 0.05) {
      EXPECT_EQ(delta, 0.0);
    } else {
      EXPECT_EQ(delta, row.at("acc1").get<double>() - base);
    }
    EXPECT_TRUE(row.contains("best_epoch") && row.contains("img_s") &&
                row.contains("overflow_steps") && row.contains("skipped_steps"));
  }

  // The text table names every column.
  r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--baseline", "seed=1,optim.lr=0.2"},
                  s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"optim.lr", "seed", "runs", "acc1", "best_epoch", "img_s", "delta"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << r.out;
  }
}

void LowerIsBetterMetricRanksTheSmallestFirst() {
  const Sweep& s = trained();
  auto r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr,seed",
                        "--metric", "val_loss", "--format", "json"},
                       s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json rows = json::parse(r.out);
  ASSERT_EQ(rows.size(), 4u);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_LE(rows[i - 1].at("val_loss").get<double>(), rows[i].at("val_loss").get<double>());
  }
  EXPECT_EQ(rows[0].at("rank").get<int>(), 1);
  // The best val_loss of a run is its smallest.
  store::Store store(s.db);
  double smallest = 1e300;
  for (const auto& run : store.runs("tiny")) {
    for (const auto& e : store.epochs(run.id)) smallest = std::min(smallest, e.metrics.at("val_loss"));
  }
  EXPECT_EQ(rows[0].at("val_loss").get<double>(), smallest);
}

void UnknownKeyMetricOrBaselineIsAUsageError() {
  const Sweep& s = trained();
  auto r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lrr"}, s.dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'optim.lrr'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optim.lr, seed"), std::string::npos) << r.err;  // the known keys

  r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--metric", "acc7"}, s.dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'acc7'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("acc1"), std::string::npos) << r.err;

  r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr", "--baseline",
                   "optim.lr=0.3"},
                  s.dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("optim.lr=0.3 matches no row"), std::string::npos) << r.err;

  r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--by", "optim.lr", "--baseline",
                   "seed=1"},
                  s.dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'seed'"), std::string::npos) << r.err;

  r = run_amptune({"compare", "--db", s.db, "--sweep", "huge"}, s.dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tiny"), std::string::npos) << r.err;  // lists the sweeps there are

  r = run_amptune({"compare", "--db", s.db, "--sweep", "tiny", "--epoch", "soon"}, s.dir);
  EXPECT_EQ(r.exit_code, 2);
}

bool starts_with(const std::string& data, const std::string& prefix) {
  return data.compare(0, prefix.size(), prefix) == 0;
}

void ReportWritesAPageWhoseImagesExist() {
  const Sweep& s = trained();
  const std::string out = sub_dir("report");
  auto r = run_amptune({"report", "--db", s.db, "--sweep", "tiny", "--out", out}, s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string html = read_file(out + "/index.html");
  EXPECT_NE(html.find("<table"), std::string::npos);
  // ResNet's headline metrics: acc5 beside the primary acc1.
  EXPECT_NE(html.find("<th>acc1</th><th>acc5</th>"), std::string::npos) << html;
  EXPECT_EQ(html.find("http://"), std::string::npos) << "the page must not need the network";
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_FALSE(fs::exists(out + "/.index.html.tmp"));
  std::regex img(R"re(<img src="([^"]+)")re");
  int images = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), img); it != std::sregex_iterator();
       ++it) {
    const std::string path = out + "/" + (*it)[1].str();
    ASSERT_TRUE(fs::exists(path)) << path;
    const std::string data = read_file(path);
    EXPECT_GT(data.size(), 100u) << path;
    EXPECT_TRUE(starts_with(data, "\x89PNG\r\n\x1a\n") || starts_with(data, "<?xml") ||
                starts_with(data, "<svg"))
        << path;
    ++images;
  }
  // The heatmap of optim.lr x seed, metric, train loss, loss scale (every run records its
  // initial scale), throughput, and the time breakdown per run.
  EXPECT_EQ(images, 6) << html;
  for (const char* file : {"heatmap_1.png", "metric_vs_epoch.png", "train_loss_vs_epoch.png",
                           "loss_scale_vs_step.png", "throughput.png", "times.png"}) {
    EXPECT_NE(html.find(std::string("src=\"") + file + "\""), std::string::npos) << file;
  }
  // The comparison table: one row per cell (4) under the header.
  size_t rows = 0;
  for (size_t at = html.find("<tr>"); at != std::string::npos; at = html.find("<tr>", at + 1)) ++rows;
  EXPECT_EQ(rows, 5u) << html;
}

void ReportWithoutGnuplotFailsClearlyAndWritesNoPage() {
  const Sweep& s = trained();
  const std::string out = sub_dir("report-without-gnuplot");
  ::setenv("AMPTUNE_GNUPLOT", "/nonexistent/gnuplot", 1);
  auto r = run_amptune({"report", "--db", s.db, "--sweep", "tiny", "--out", out}, s.dir);
  ::unsetenv("AMPTUNE_GNUPLOT");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("gnuplot-nox"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out + "/index.html"));
}


// One training for several checks: ctest runs every TEST in its own process.
TEST(CompareCli, StatusAndCompareOnATrainedSweep) {
  {
    SCOPED_TRACE("StatusCountsRunsAndFlagsAStaleWorker");
    StatusCountsRunsAndFlagsAStaleWorker();
  }
  {
    SCOPED_TRACE("CsvHasOneRowPerLrWithTheMeanBestMetric");
    CsvHasOneRowPerLrWithTheMeanBestMetric();
  }
  {
    SCOPED_TRACE("EpochLastAndNTakeThatEpochsValue");
    EpochLastAndNTakeThatEpochsValue();
  }
  {
    SCOPED_TRACE("JsonAndBaselineDelta");
    JsonAndBaselineDelta();
  }
  {
    SCOPED_TRACE("LowerIsBetterMetricRanksTheSmallestFirst");
    LowerIsBetterMetricRanksTheSmallestFirst();
  }
  {
    SCOPED_TRACE("UnknownKeyMetricOrBaselineIsAUsageError");
    UnknownKeyMetricOrBaselineIsAUsageError();
  }
}

TEST(CompareCli, ReportOfATrainedSweep) {
  {
    SCOPED_TRACE("ReportWritesAPageWhoseImagesExist");
    ReportWritesAPageWhoseImagesExist();
  }
  {
    SCOPED_TRACE("ReportWithoutGnuplotFailsClearlyAndWritesNoPage");
    ReportWithoutGnuplotFailsClearlyAndWritesNoPage();
  }
}

}  // namespace
}  // namespace amptune::testing
