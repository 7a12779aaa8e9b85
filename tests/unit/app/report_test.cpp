// Unit tests of the report (app/views/report.h): the model's series (a fork's lineage, a primary
// metric kept on the epoch rows, loss-scale steps, img/s, named module errors and the first
// departure) and its table (headline metrics) from made-up runs, and the files write_report
// makes with a stand-in for gnuplot (a shell script that writes the PNG files the script names),
// without it, and when it fails.
#include "app/views/report.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "app/views/report_plots.h"
#include "core/error.h"
#include "unit/app/app_fixture.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;
using Points = std::vector<std::pair<double, double>>;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ReportTest : public AppTest {
 protected:
  // An executable script in the scratch directory.
  std::string script(const std::string& name, const std::string& body) {
    const std::string path = dir_.write(name, "#!/bin/sh\n" + body);
    ::chmod(path.c_str(), 0755);
    return path;
  }
  // A stand-in for gnuplot: writes a fake PNG for every "set output 'x.png'" of the script.
  std::string fake_gnuplot() {
    return script("fake-gnuplot",
                  "sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\" | while read f; do\n"
                  "  printf 'PNG of %s\\n' \"$f\" > \"$f\"\n"
                  "done\n");
  }
  // The message and code of the amptune::Error f throws.
  static std::pair<std::string, ExitCode> error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& error) {
      return {error.what(), error.code()};
    }
    return {"<no error>", ExitCode::kOk};
  }

  // Sweep "grid": a parent (cell 0, acc1 10 20 30 40) and a fork of its epoch 1 (cell 1, own
  // epochs 2 and 3: acc1 25 35); the parent has loss-scale events, the fork runs at 50 img/s.
  void add_fork_sweep() {
    Run parent;
    parent.axes = R"({"amp.loss_scale": "dynamic"})";
    parent.label = "parent";
    parent_ = add_run(parent);
    for (int epoch = 0; epoch < 4; ++epoch) {
      Epoch e;
      e.metrics["acc1"] = 10.0 * (epoch + 1);
      e.fps = 100 + 10 * epoch;  // mean 115
      if (epoch == 0)
        e.scale_events = {{0, 65536, ScaleReason::kInit}, {5, 32768, ScaleReason::kOverflow}};
      if (epoch == 1) e.scale_events = {{15, 65536, ScaleReason::kGrowth}};
      add_epoch(parent_, epoch, e);
    }
    finish(parent_);
    Run fork;
    fork.cell = 1;
    fork.axes = R"({"amp.loss_scale": 128})";
    fork.label = "fork";
    fork.fork = records::ForkOrigin{parent_, 1, R"({"amp.loss_scale": 128})",
                                  "amp.loss_scale: \"dynamic\" -> 128", false};
    fork_ = add_run(fork);
    for (int epoch = 2; epoch < 4; ++epoch) {
      Epoch e;
      e.metrics["acc1"] = epoch == 2 ? 25 : 35;
      e.fps = 50;
      add_epoch(fork_, epoch, e);
    }
    finish(fork_);
  }

  // A labelled run of `sweep`, a fork when `fork` is given.
  int64_t labelled_run(const std::string& sweep, const std::string& label,
                       std::optional<records::ForkOrigin> fork = std::nullopt) {
    Run r;
    r.sweep = sweep;
    r.label = label;
    r.fork = fork;
    return add_run(r);
  }
  // A tune search of the reference's sweep on acc1, searching.
  records::TuneSearchRow start_search(int64_t reference, int64_t start) {
    records::TuneSearchRow row;
    row.sweep_id = store_.find_run(reference)->sweep_id;
    row.block_json = "{}";
    row.metric = "acc1";
    row.reference_run_id = reference;
    row.start_run_id = start;
    return store_.ensure_tune_search(row);
  }

  int64_t parent_ = 0, fork_ = 0;
};

TEST_F(ReportTest, AForkContinuesItsParentsLine) {
  add_fork_sweep();
  const ReportModel model = build_report(store_, "grid");
  EXPECT_EQ(model.sweep, "grid");
  EXPECT_EQ(model.database, path_);
  EXPECT_EQ(model.runs, 2);
  EXPECT_EQ(model.table.rows.size(), 2u);
  ASSERT_EQ(model.metric.size(), 2u);
  EXPECT_EQ(model.metric[0].run_id, parent_);
  EXPECT_EQ(model.metric[0].title, "parent");
  EXPECT_EQ(model.metric[0].points, (Points{{0, 10}, {1, 20}, {2, 30}, {3, 40}}));
  EXPECT_EQ(model.metric[1].run_id, fork_);
  EXPECT_EQ(model.metric[1].title, "fork");
  // The parent's epochs 0 and 1 (the fork point), then the fork's own.
  EXPECT_EQ(model.metric[1].points, (Points{{0, 10}, {1, 20}, {2, 25}, {3, 35}}));
  ASSERT_EQ(model.train_loss.size(), 2u);
  EXPECT_EQ(model.train_loss[1].points, (Points{{0, 2}, {1, 1.75}, {2, 1.5}, {3, 1.25}}));
  EXPECT_FALSE(model.truncated);
}

// A tune search as a tree: the start at the root, round 1's candidates under it, round 2's under
// the candidate it started from; the curves of the reference, the start and the answer (a fork:
// its parent's epochs up to the fork, then its own). The page shows the tree.
TEST_F(ReportTest, ATuneSearchIsATreeOfRunsWithItsCurves) {
  auto run = [&](const std::string& label, std::optional<records::ForkOrigin> fork = std::nullopt) {
    return labelled_run("t", label, fork);
  };
  const int64_t ref = run("reference");
  const int64_t start = run("start");
  add_epochs(ref, "acc1", {50, 60, 70});
  add_epochs(start, "acc1", {50, 20, 10});
  const int64_t pruned = run("r1 casts");
  add_epochs(pruned, "acc1", {5});
  const int64_t best = run("r1 loss_scale");
  add_epochs(best, "acc1", {30, 40, 50});
  records::ForkOrigin from_best{best, 0, R"({"amp.fp32_modules":["conv1"]})", "", false};
  const int64_t answer = run("r2 fp32", from_best);
  for (int epoch = 1; epoch < 3; ++epoch) {
    Epoch e;
    e.metrics["acc1"] = epoch == 1 ? 62 : 68;
    add_epoch(answer, epoch, e);
  }
  records::TuneSearchRow row = start_search(ref, start);
  store_.record_tune_round({row.id, 1, records::TuneRoundKind::kSearch, start, -1, -1, ""});
  store_.record_tune_round({row.id, 2, records::TuneRoundKind::kSearch, best, 0, 0, ""});
  auto candidate = [&](int round, int seq, const std::string& move, int64_t run,
                       const std::string& outcome) {
    records::TuneCandidateRow c;
    c.search_id = row.id;
    c.round = round;
    c.seq = seq;
    c.move = parse_tune_move_kind(move);
    c.change_json = R"({"k":"v"})";
    c.reason = "why " + move;
    c.run_id = run;
    c.outcome = *records::parse_outcome(outcome);
    c.value = 1;
    store_.record_tune_candidate(c);
  };
  candidate(1, 0, "casts", pruned, "pruned");
  candidate(1, 1, "loss_scale", best, "outside");
  candidate(2, 0, "fp32_modules", answer, "within");
  row.status = records::TuneStatus::kAnswered;
  row.answer_run_id = answer;
  row.answer_yaml = "amp.fp32_modules: [conv1]\n";
  store_.finish_tune_search(row);

  const ReportModel model = build_report(store_, "t");
  ASSERT_TRUE(model.tune);
  const TuneTree& tree = *model.tune;
  ASSERT_EQ(tree.nodes.size(), 4u);
  const TuneNode& root = tree.nodes[0];
  EXPECT_EQ(root.run_id, start);
  EXPECT_EQ(root.outcome, "start");
  ASSERT_EQ(root.children.size(), 2u);
  EXPECT_EQ(tree.nodes[root.children[0]].outcome, "pruned");
  EXPECT_EQ(tree.nodes[root.children[0]].move, "casts k=v");
  const TuneNode& second = tree.nodes[root.children[1]];
  EXPECT_EQ(second.run_id, best);
  ASSERT_EQ(second.children.size(), 1u);
  EXPECT_EQ(tree.nodes[second.children[0]].run_id, answer);
  EXPECT_TRUE(tree.nodes[second.children[0]].answer);
  EXPECT_FALSE(second.answer);
  ASSERT_EQ(tree.curves.size(), 3u);
  EXPECT_EQ(tree.curves[0].points, (Points{{0, 50}, {1, 60}, {2, 70}}));
  EXPECT_EQ(tree.curves[2].run_id, answer);
  EXPECT_EQ(tree.curves[2].points, (Points{{0, 30}, {1, 62}, {2, 68}}));
  const ReportFiles files = write_report(model, {(dir_.path() / "out").string(), "gnuplot", "t"});
  const std::string html = testing::read_file(files.index);
  EXPECT_NE(html.find("round 2: fp32_modules k=v</span> &rarr; <span class=\"node within "
                      "answer\">"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("tune_curves.png"), std::string::npos);
  Run other;
  other.sweep = "other";
  add_run(other);
  EXPECT_FALSE(build_report(store_, "other").tune) << "a sweep without a search has no tree";
}

// A tune search that went 3,000 rounds deep, each round's candidate forking the one before at
// its last epoch: every node is in the tree and the page, and the answer's curve and line reach
// back to the chain's first epoch (the walks up the fork chain once stopped after 1000
// ancestors, and the tree kept a path from the root per node: memory quadratic in the depth).
TEST_F(ReportTest, ADeepTuneChainIsReadWhole) {
  constexpr int kDepth = 3000;
  const int64_t ref = labelled_run("deep", "reference"), start = labelled_run("deep", "start");
  add_epochs(ref, "acc1", {50});
  add_epochs(start, "acc1", {10});
  records::TuneSearchRow row = start_search(ref, start);
  int64_t previous = start;
  for (int round = 1; round <= kDepth; ++round) {
    const int64_t id = labelled_run("deep", "r" + std::to_string(round),
                                    records::ForkOrigin{previous, round - 1, "{}", "", false});
    Epoch e;
    e.metrics["acc1"] = round;
    add_epoch(id, round, e);
    store_.record_tune_round(
        {row.id, round, records::TuneRoundKind::kSearch, previous, round - 1, std::nullopt, ""});
    records::TuneCandidateRow c;
    c.search_id = row.id;
    c.round = round;
    c.move = TuneMoveKind::kCasts;
    c.change_json = "{}";
    c.reason = "deeper";
    c.run_id = id;
    c.outcome = records::CandidateOutcome::kOutside;
    store_.record_tune_candidate(c);
    previous = id;
  }
  row.status = records::TuneStatus::kExhausted;
  row.answer_run_id = previous;
  store_.finish_tune_search(row);

  const ReportModel model = build_report(store_, "deep");
  ASSERT_TRUE(model.tune);
  ASSERT_EQ(model.tune->curves.size(), 3u);
  const auto& curve = model.tune->curves[2].points;
  ASSERT_EQ(curve.size(), kDepth + 1u);
  EXPECT_EQ(curve.front(), (std::pair<double, double>{0, 10}));
  EXPECT_EQ(curve.back(), (std::pair<double, double>{kDepth, kDepth}));
  EXPECT_TRUE(model.truncated);  // 3002 runs, 60 plotted
  const ReportFiles files = write_report(model, {(dir_.path() / "out").string(), "gnuplot", "t"});
  const std::string html = testing::read_file(files.index);
  size_t nodes = 0;
  for (size_t at = html.find("<span class=\"node "); at != std::string::npos;
       at = html.find("<span class=\"node ", at + 1)) {
    ++nodes;
  }
  EXPECT_EQ(nodes, kDepth + 1u);
}

TEST_F(ReportTest, LossScaleStepsHoldTheLastScaleToTheLastStep) {
  add_fork_sweep();
  const ReportModel model = build_report(store_, "grid");
  ASSERT_EQ(model.loss_scale.size(), 1u);  // the fork recorded no events
  EXPECT_EQ(model.loss_scale[0].run_id, parent_);
  // Events at steps 0, 5, 15; the last epoch ends at step 40.
  EXPECT_EQ(model.loss_scale[0].points, (Points{{0, 65536}, {5, 32768}, {15, 65536}, {40, 65536}}));
}

TEST_F(ReportTest, ThroughputIsTheMeanImgPerSecondOfEachRunWithEpochs) {
  add_fork_sweep();
  Run idle;
  idle.cell = 2;
  add_run(idle);  // no epoch: no bar, no line
  const ReportModel model = build_report(store_, "grid");
  EXPECT_EQ(model.runs, 3);
  ASSERT_EQ(model.throughput.size(), 2u);
  EXPECT_EQ(model.throughput[0].label, "0: parent");
  EXPECT_EQ(model.throughput[0].img_s, 115.0);
  EXPECT_EQ(model.throughput[1].label, "1: fork");
  EXPECT_EQ(model.throughput[1].img_s, 50.0);
  EXPECT_EQ(model.metric.size(), 2u);
}

// The table's mfu column comes from compare (115 img/s x 1e6 FLOPs / 1e9 FLOP/s: 11.5%); the
// page names the peak it is a share of, once however many runs share it.
TEST_F(ReportTest, ThePageNamesThePeaksOfTheMfuColumn) {
  add_fork_sweep();
  const records::RunWork work{1e6, 1e9, "fp32", "cpu: 1 core x 16 fp32 lanes (avx512f)"};
  store_.record_run_work(parent_, work);
  store_.record_run_work(fork_, work);
  const ReportModel model = build_report(store_, "grid");
  EXPECT_EQ(
      model.peaks,
      (std::vector<std::string>{"0.001 TFLOP/s fp32 (cpu: 1 core x 16 fp32 lanes (avx512f))"}));
  const fs::path out = dir_.path() / "mfu";
  write_report(model, {out.string(), fake_gnuplot(), "amptune test"});
  const std::string html = read(out / "index.html");
  EXPECT_NE(html.find("<th>mfu</th>"), std::string::npos) << html;
  EXPECT_NE(html.find(">11.5%</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("Peak: 0.001 TFLOP/s fp32 (cpu: 1 core x 16 fp32 lanes (avx512f)).</p>"),
            std::string::npos)
      << html;
}

// Every plot stops at kMaxPlottedRuns runs, the bar chart too (gnuplot took 28 s over the bars of
// 100,000 runs, no more readable than 60); the table lists every run.
TEST_F(ReportTest, PlotsStopAtTheMaximumNumberOfRuns) {
  for (int cell = 0; cell < static_cast<int>(kMaxPlottedRuns) + 1; ++cell) {
    Run run;
    run.sweep = "wide";
    run.cell = cell;
    run.axes = "{\"seed\": " + std::to_string(cell) + "}";
    add_epochs(add_run(run), "acc1", {1.0 * cell});
  }
  const ReportModel model = build_report(store_, "wide");
  EXPECT_TRUE(model.truncated);
  EXPECT_EQ(model.metric.size(), kMaxPlottedRuns);
  EXPECT_EQ(model.train_loss.size(), kMaxPlottedRuns);
  EXPECT_EQ(model.throughput.size(), kMaxPlottedRuns);
  EXPECT_EQ(model.table.rows.size(), kMaxPlottedRuns + 1);
}

TEST_F(ReportTest, DiagnosedRunsPlotTheirNewestDiagnosisPerModule) {
  add_fork_sweep();
  auto rows = [](double first_cosine) {
    std::vector<records::DiagnosticRow> out;
    for (int batch = 0; batch < 2; ++batch) {
      for (int seq = 0; seq < 3; ++seq) {
        records::DiagnosticRow r;
        r.kind = records::DiagnosticKind::kForward;
        r.batch = batch;
        r.seq = seq;
        r.module = "m" + std::to_string(seq);
        r.dtype = TensorDtype::kFp16;
        r.numel = 8;
        // batch 1 is worse at seq 1; seq 2 lost to inf (NaN cosine) in batch 0
        r.cosine = seq == 0 ? first_cosine : seq == 1 ? (batch == 1 ? 0.9 : 0.99) : 1.0;
        if (seq == 2 && batch == 0) r.cosine = std::numeric_limits<double>::quiet_NaN();
        out.push_back(r);
      }
    }
    return out;
  };
  records::Diagnosis old_one;
  old_one.run_id = parent_;
  old_one.epoch = 1;
  old_one.batches = 2;
  old_one.rows = rows(0.5);
  store_.record_diagnosis(old_one);
  records::Diagnosis d = old_one;
  d.epoch = 3;
  d.rows = rows(1.0);
  store_.record_diagnosis(d);
  const ReportModel model = build_report(store_, "grid");
  ASSERT_EQ(model.module_error.size(), 1u);  // the fork was not diagnosed
  const ModuleErrors& errors = model.module_error[0];
  EXPECT_EQ(errors.series.run_id, parent_);
  EXPECT_EQ(errors.series.title, "parent, epoch 3");
  const Points& p = errors.series.points;
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (std::pair<double, double>{0, 1e-12}));  // exact
  EXPECT_NEAR(p[1].second, 0.1, 1e-12);                    // the worst batch
  EXPECT_EQ(p[2].second, 1.0);  // lost to inf in one batch: the worst there is
  EXPECT_EQ(errors.modules, (std::vector<std::string>{"m0", "m1", "m2"}));
  EXPECT_EQ(errors.cosine_min, 0.99);
  // m1's worst cosine, 0.9, is the first below the diagnosis's 0.99.
  ASSERT_TRUE(errors.first.has_value());
  EXPECT_EQ(errors.first->seq, 1);
  EXPECT_EQ(errors.first->module, "m1");
  EXPECT_EQ(errors.first->reason, "1 - cosine 0.1 > 0.01");
}

// What departs first: an overflow, values lost to inf/NaN, a cosine under the diagnosis's own
// threshold; nothing when every module stays close.
TEST_F(ReportTest, TheFirstDepartureFollowsTheDiagnosisThreshold) {
  add_fork_sweep();
  auto diagnose = [&](int64_t run, double cosine_min, double cosine1, double overflow2) {
    records::Diagnosis d;
    d.run_id = run;
    d.epoch = 3;
    d.batches = 1;
    d.cosine_min = cosine_min;
    for (int seq = 0; seq < 3; ++seq) {
      records::DiagnosticRow r;
      r.kind = records::DiagnosticKind::kForward;
      r.seq = seq;
      r.module = "layer" + std::to_string(seq);
      r.dtype = TensorDtype::kFp16;
      r.numel = 4;
      r.cosine = seq == 1 ? cosine1 : 0.999;
      r.overflow_frac = seq == 2 ? overflow2 : 0;
      d.rows.push_back(r);
    }
    store_.record_diagnosis(d);
    const ReportModel model = build_report(store_, "grid");
    return model.module_error.back();
  };
  EXPECT_FALSE(diagnose(parent_, 0.99, 0.995, 0).first.has_value());
  const ModuleErrors strict = diagnose(parent_, 0.999, 0.995, 0);
  ASSERT_TRUE(strict.first.has_value());
  EXPECT_EQ(strict.first->module, "layer1");
  EXPECT_EQ(strict.first->reason, "1 - cosine 0.005 > 0.001");
  const ModuleErrors overflow = diagnose(fork_, 0.99, 0.995, 0.025);
  ASSERT_TRUE(overflow.first.has_value());
  EXPECT_EQ(overflow.first->module, "layer2");
  EXPECT_EQ(overflow.first->reason, "overflow (2.5% of its outputs)");
  const ModuleErrors lost = diagnose(fork_, 0.99, std::numeric_limits<double>::quiet_NaN(), 0.025);
  ASSERT_TRUE(lost.first.has_value());
  EXPECT_EQ(lost.first->module, "layer1");
  EXPECT_EQ(lost.first->reason, "values lost to inf/NaN");
}

// A primary metric kept in an epochs column (train_loss here) has a line: the lineage reads it
// from the epoch rows, the parent's up to the fork point, then the fork's own.
TEST_F(ReportTest, APrimaryMetricInAnEpochsColumnHasALine) {
  Run parent;
  parent.sweep = "loss";
  parent.label = "parent";
  parent.columns = {{"primary_metric", "\"train_loss\""}};
  const int64_t parent_id = add_run(parent);
  add_epochs(parent_id, "acc1", {10, 20, 30});  // train_loss 2, 1.75, 1.5
  Run fork = parent;
  fork.cell = 1;
  fork.label = "fork";
  fork.fork = records::ForkOrigin{parent_id, 0, "{}", "", false};
  const int64_t fork_id = add_run(fork);
  records::EpochRecord own;
  own.run_id = fork_id;
  own.epoch = 1;
  own.global_step = 20;
  own.lr = 0.05;
  own.train_loss = 1.25;
  store_.record_epoch(own);
  const ReportModel model = build_report(store_, "loss");
  EXPECT_EQ(model.table.metric, "train_loss");
  ASSERT_EQ(model.metric.size(), 2u);
  EXPECT_EQ(model.metric[0].points, (Points{{0, 2}, {1, 1.75}, {2, 1.5}}));
  EXPECT_EQ(model.metric[1].points, (Points{{0, 2}, {1, 1.25}}));
  EXPECT_EQ(model.metric[1].points, model.train_loss[1].points);
}

// RootNet's runs rank by ap_root_25 on MuPoTS; its other headline metric, mrpe, stands beside it
// at the same epoch. A name not registered (another build's model) adds nothing.
TEST_F(ReportTest, HeadlineMetricsStandBesideThePrimary) {
  for (int cell = 0; cell < 2; ++cell) {
    Run run;
    run.sweep = "rootnet";
    run.cell = cell;
    run.axes = cell ? R"({"amp.opt_level": "O1"})" : R"({"amp.opt_level": "O0"})";
    run.columns = {{"model", "\"rootnet\""}, {"primary_metric", "\"ap_root_25\""}};
    const int64_t id = add_run(run);
    for (int epoch = 0; epoch < 2; ++epoch) {
      Epoch e;
      e.metrics = {{"ap_root_25", 10.0 * (cell + 1) + (epoch == 0 ? 5 : 0)},
                   {"mrpe", 100.0 + 10 * cell + epoch},
                   {"mrpe_x", 1}};
      add_epoch(id, epoch, e);
    }
  }
  Run other;
  other.sweep = "rootnet";
  other.cell = 2;
  other.axes = R"({"amp.opt_level": "O2"})";
  other.columns = {{"model", "\"vgg16\""}, {"primary_metric", "\"ap_root_25\""}};
  add_run(other);
  const ReportModel model = build_report(store_, "rootnet");
  EXPECT_EQ(model.table.metric, "ap_root_25");
  EXPECT_EQ(model.table.also, (std::vector<std::string>{"mrpe"}));
  ASSERT_EQ(model.table.rows.size(), 3u);
  EXPECT_EQ(model.table.rows[0].value, 25.0);            // O1 at epoch 0 ...
  EXPECT_EQ(model.table.rows[0].also_values[0], 110.0);  // ... and its mrpe there
  EXPECT_EQ(model.table.rows[1].also_values[0], 100.0);

  const fs::path out = dir_.path() / "rootnet";
  write_report(model, {out.string(), fake_gnuplot(), "t"});
  const std::string html = read(out / "index.html");
  EXPECT_NE(html.find("<th>ap_<wbr>root_<wbr>25</th><th>mrpe</th>"), std::string::npos) << html;
  EXPECT_NE(html.find("beside it <b>mrpe</b> at the same epoch"), std::string::npos);
  // Without a registered model (the made-up runs of the other tests) nothing stands beside.
  add_fork_sweep();
  EXPECT_TRUE(build_report(store_, "grid").table.also.empty());
}

// Links planted in the --out directory at names the report writes: removed, their targets
// untouched, the report's files written in their place.
TEST_F(ReportTest, LinksInTheOutDirectoryAreNotWrittenThrough) {
  add_fork_sweep();
  const fs::path out = dir_.path() / "report";
  fs::create_directories(out);
  const std::string victim = dir_.write("victim.txt", "precious");
  for (const char* name : {"metric_vs_epoch.dat", "metric_vs_epoch.png", "gnuplot.log",
                           "report.gp", "index.html", ".index.html.tmp"}) {
    fs::create_symlink(victim, out / name);
  }
  write_report(build_report(store_, "grid"), {out.string(), fake_gnuplot(), "t"});
  EXPECT_EQ(read(victim), "precious");
  for (const char* name : {"metric_vs_epoch.dat", "metric_vs_epoch.png", "gnuplot.log",
                           "report.gp", "index.html"}) {
    EXPECT_FALSE(fs::is_symlink(out / name)) << name;
    EXPECT_TRUE(fs::is_regular_file(out / name)) << name;
  }
}

// A run label or sweep name with a line break (a merged database can carry one) stays inside its
// gnuplot string: the real gnuplot runs no command of it.
TEST_F(ReportTest, NamesCannotInjectGnuplotCommands) {
  const std::string gnuplot = "/usr/bin/gnuplot";
  if (!fs::exists(gnuplot)) GTEST_SKIP() << gnuplot << " missing (tools/install-deps.sh installs it)";
  const fs::path out = dir_.path() / "report";
  const std::string marker = (dir_.path() / "injected").string();
  Run run;
  run.sweep = "evil\nsystem('touch " + marker + "')\n#";
  run.label = "x'\nsystem('touch " + marker + "')\n#";
  const int64_t id = add_run(run);
  Epoch e;
  e.metrics["acc1"] = 50;
  add_epoch(id, 0, e);
  finish(id);
  write_report(build_report(store_, run.sweep), {out.string(), gnuplot, "t"});
  EXPECT_FALSE(fs::exists(marker)) << read(out / "report.gp");
  EXPECT_TRUE(fs::exists(out / "metric_vs_epoch.png"));
}

TEST_F(ReportTest, UnknownSweepIsAUsageError) {
  EXPECT_THROW(build_report(store_, "nope"), UsageError);
}

TEST_F(ReportTest, WritesThePageTheScriptAndTheData) {
  add_fork_sweep();
  const ReportModel model = build_report(store_, "grid");
  const fs::path out = dir_.path() / "report" / "nested";
  const ReportFiles files = write_report(model, {out.string(), fake_gnuplot(), "amptune test"});
  EXPECT_EQ(files.index, (out / "index.html").string());
  EXPECT_EQ(files.plots, 4);  // no diagnosed run: a note instead of the module-error plot
  EXPECT_NE(read(out / "index.html").find("no run of this sweep was diagnosed"), std::string::npos);
  const std::string html = read(out / "index.html");
  for (const char* png : {"metric_vs_epoch.png", "train_loss_vs_epoch.png",
                          "loss_scale_vs_step.png", "throughput.png"}) {
    EXPECT_NE(html.find(std::string("<img src=\"") + png + "\""), std::string::npos) << png;
    EXPECT_EQ(read(out / png), std::string("PNG of ") + png + "\n");
  }
  EXPECT_NE(html.find("<title>amptune report: grid</title>"), std::string::npos);
  EXPECT_NE(html.find("Written by amptune test."), std::string::npos);
  EXPECT_NE(html.find("<td class=\"t\">128</td>"), std::string::npos) << html;  // a --by value
  size_t rows = 0;
  for (size_t at = html.find("<tr>"); at != std::string::npos; at = html.find("<tr>", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, 3u);  // header + 2 runs
  EXPECT_FALSE(fs::exists(out / ".index.html.tmp"));
  // The loss-scale data: one block, its steps as the model has them.
  EXPECT_EQ(read(out / "loss_scale_vs_step.dat"),
            "# parent\n0 65536\n5 32768\n15 65536\n40 65536\n\n\n");
  EXPECT_EQ(read(out / "throughput.dat"), "\"0: parent\" 115\n\"1: fork\" 50\n");
  const std::string gp = read(out / "report.gp");
  EXPECT_NE(gp.find("set ylabel 'acc1 (higher is better)'"), std::string::npos);
  // Bar labels slanted under the bars, the canvas taller by the longest (9 characters).
  EXPECT_NE(gp.find("size 960,598 noenhanced font 'sans,10'\nset xtics rotate by -30 left "
                    "noenhanced\nset output 'throughput.png'"),
            std::string::npos)
      << gp;
  // Loss scales on a log2 axis, ticks at powers of two labelled as such (app/views/plot_axes.h).
  EXPECT_NE(gp.find("set ylabel 'loss scale (log2)'\nset logscale y 2\n"
                    "set ytics ('2^15' 32768, '2^16' 65536)\n"),
            std::string::npos)
      << gp;
  // The key below each line plot (two short titles: one row), the canvas taller by its row.
  EXPECT_NE(gp.find("size 960,578 noenhanced font 'sans,10'\n"
                    "set key default\nset key outside below left Left reverse maxcols 2\n"
                    "set output 'metric_vs_epoch.png'"),
            std::string::npos)
      << gp;
}

// The page has a section for every plot of the list (app/views/report_plots.h) the report draws, in
// the list's order, titled by the list: its PNG, or the list's note where the sweep has no data.
TEST_F(ReportTest, ThePageDrawsThePlotListsReportPlotsInItsOrder) {
  add_fork_sweep();
  const ReportModel model = build_report(store_, "grid");
  const fs::path out = dir_.path() / "report";
  write_report(model, {out.string(), fake_gnuplot(), "amptune test"});
  const std::string html = read(out / "index.html");
  const std::string gp = read(out / "report.gp");
  size_t at = 0;
  int drawn = 0;
  for (const PlotDef& def : report_plots()) {
    const std::string png = def.stem + ".png";
    const std::string section = "<h2>" + plot_text(def.title, model, def) + "</h2>\n";
    if (!(def.places & kInReport) || !has_plot(model, def)) {
      EXPECT_EQ(html.find(section), std::string::npos) << def.stem;
      EXPECT_FALSE(fs::exists(out / png)) << def.stem;
      continue;
    }
    const size_t found = html.find(section, at);
    ASSERT_NE(found, std::string::npos) << def.stem << " in order";
    at = found + section.size();
    const bool has_data = fs::exists(out / png);
    drawn += has_data;
    EXPECT_EQ(html.compare(at, 10, "<img src=\"") == 0, has_data) << def.stem;
    EXPECT_EQ(gp.find("set output '" + png + "'") != std::string::npos, has_data) << def.stem;
    if (!has_data) {
      EXPECT_EQ(html.compare(at, 16, "<p class=\"note\">"), 0) << def.stem;
      EXPECT_NE(html.find(plot_text(def.no_data, model, def), at), std::string::npos) << def.stem;
    }
  }
  EXPECT_EQ(drawn, 4);  // metric, train loss, loss scale, img/s; no diagnosis, times or search
}

// A run title too long for the key keeps its start and end there; the model keeps it whole.
TEST_F(ReportTest, LongTitlesAreShortenedInTheKeyOnly) {
  Run run;
  run.sweep = "long";
  run.label = "casts.int32=[" + std::string(120, 'k') + "] amp.opt_level=O1";
  add_epochs(add_run(run), "acc1", {1, 2});
  const ReportModel model = build_report(store_, "long");
  EXPECT_EQ(model.metric[0].title, run.label);
  const fs::path out = dir_.path() / "long";
  write_report(model, {out.string(), fake_gnuplot(), "t"});
  const std::string key =
      "casts.int32=[" + std::string(35, 'k') + "..." + std::string(31, 'k') + "] amp.opt_level=O1";
  ASSERT_EQ(key.size(), 100u);
  const std::string gp = read(out / "report.gp");
  EXPECT_NE(gp.find("title '" + key + "'\n"), std::string::npos) << gp;
  // One column of one row.
  EXPECT_NE(gp.find("size 960,578 noenhanced font 'sans,10'\n"
                    "set key default\nset key outside below left Left reverse maxcols 1\n"),
            std::string::npos);
}

// The table fits the page: long values may break after commas, a wide table is set smaller and
// scrolls sideways in its box when it still does not fit.
TEST_F(ReportTest, WideTablesWrapAndScroll) {
  Run run;
  run.sweep = "casts";
  run.axes = R"({"casts.int32": ["k_value", "target_coord", "bbox"], "optim.lr": 0.05})";
  add_run(run);
  const fs::path out = dir_.path() / "casts";
  write_report(build_report(store_, "casts"), {out.string(), fake_gnuplot(), "t"});
  const std::string html = read(out / "index.html");
  EXPECT_NE(html.find("<div class=\"scroll\"><table>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td class=\"t\">[&quot;k_<wbr>value&quot;,<wbr>&quot;target_<wbr>coord"
                      "&quot;,<wbr>&quot;bbox&quot;]</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<td class=\"t\">0.05</td>"), std::string::npos);  // never in a number
  EXPECT_NE(html.find("<th class=\"t\">casts.<wbr>int32</th><th class=\"t\">optim.<wbr>lr</th>"
                      "<th>runs</th>"),
            std::string::npos);
  EXPECT_NE(html.find("<th>overflow_<wbr>steps</th>"), std::string::npos);
  EXPECT_NE(html.find(".scroll{max-width:100%;overflow-x:auto}"), std::string::npos);

  CompareTable wide = build_report(store_, "casts").table;
  wide.by = {"a", "b", "c", "d"};  // 13 columns
  for (auto& row : wide.rows) row.by_values = {1, 2, 3, 4};
  ReportModel model = build_report(store_, "casts");
  model.table = wide;
  write_report(model, {out.string(), fake_gnuplot(), "t"});
  EXPECT_NE(read(out / "index.html").find("<table class=\"wide\">"), std::string::npos);
}

// The module-error plot names the modules on its x axis and marks the first that departs, with
// the diagnosis's threshold; the page says the same in words.
TEST_F(ReportTest, ModuleErrorPlotNamesModulesAndMarksTheFirstDeparture) {
  add_fork_sweep();
  records::Diagnosis d;
  d.run_id = parent_;
  d.epoch = 3;
  d.batches = 1;
  const int modules = 100;
  for (int seq = 0; seq < modules; ++seq) {
    records::DiagnosticRow r;
    r.kind = records::DiagnosticKind::kForward;
    r.seq = seq;
    r.module = "backbone.layer" + std::to_string(seq);
    r.dtype = TensorDtype::kFp16;
    r.numel = 4;
    r.cosine = seq == 61 ? 0.9 : 0.9999;
    d.rows.push_back(r);
  }
  store_.record_diagnosis(d);
  const fs::path out = dir_.path() / "modules";
  const ReportFiles files =
      write_report(build_report(store_, "grid"), {out.string(), fake_gnuplot(), "t"});
  EXPECT_EQ(files.plots, 5);
  const std::string gp = read(out / "report.gp");
  // 100 modules: every third named (at most 48 names), the marked one too, the rest minor tics.
  const std::string tics =
      "set xtics rotate by 90 right font ',8' ('backbone.layer0' 0, '' 1 1, "
      "'' 2 1, 'backbone.layer3' 3, ";
  EXPECT_NE(gp.find(tics), std::string::npos) << gp;
  // The marked module's named neighbours (60 and 63) give way to it.
  EXPECT_NE(gp.find("'backbone.layer57' 57, '' 58 1, '' 59 1, '' 60 1, 'backbone.layer61' 61, "
                    "'' 62 1, '' 63 1, '' 64 1, '' 65 1, 'backbone.layer66' 66, "),
            std::string::npos)
      << gp;
  EXPECT_NE(gp.find("set arrow from 61, graph 0 to 61, graph 1 nohead dt 2 lw 1.5 lc 1 front\n"
                    "set label 'first departure: backbone.layer61' at 61, graph 0.97 right"),
            std::string::npos)
      << gp;
  // The threshold: a dotted line in the key.
  EXPECT_NE(gp.find(" with lines dt 3 lw 1.5 lc rgb 'gray40' title 'threshold: 1 - cosine_min = "
                    "0.01'\n"),
            std::string::npos)
      << gp;
  EXPECT_NE(gp.find("set logscale y 10\nset format y '10^%L'\n"), std::string::npos);
  EXPECT_NE(gp.find("unset arrow\nunset label\nset xtics autofreq norotate autojustify font ''\n"),
            std::string::npos);
  const std::string html = read(out / "index.html");
  EXPECT_NE(html.find("<li>parent, epoch 3: first departs at backbone.layer61 (execution index "
                      "61): 1 - cosine 0.1 &gt; 0.01</li>"),
            std::string::npos)
      << html;
}

TEST_F(ReportTest, WithoutDataThePageHasNotesAndGnuplotIsNotRun) {
  Run run;
  run.sweep = "fresh";
  add_run(run);
  const fs::path out = dir_.path() / "fresh";
  const ReportFiles files =
      write_report(build_report(store_, "fresh"), {out.string(), "/nonexistent/gnuplot", "t"});
  EXPECT_EQ(files.plots, 0);
  const std::string html = read(out / "index.html");
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("no run of this sweep has a value of acc1 yet"), std::string::npos);
  EXPECT_FALSE(fs::exists(out / "report.gp"));
}

TEST_F(ReportTest, MissingGnuplotIsAnEnvironmentErrorAndWritesNoPage) {
  add_fork_sweep();
  const fs::path out = dir_.path() / "out";
  const auto [message, code] = error_of([&] {
    write_report(build_report(store_, "grid"), {out.string(), "/nonexistent/gnuplot", "t"});
  });
  EXPECT_EQ(code, ExitCode::kEnvironment);
  EXPECT_NE(message.find("cannot run '/nonexistent/gnuplot'"), std::string::npos) << message;
  EXPECT_NE(message.find("gnuplot-nox"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(out / "index.html"));
}

TEST_F(ReportTest, FailingGnuplotIsAnEnvironmentErrorWithItsOutput) {
  add_fork_sweep();
  const fs::path out = dir_.path() / "out";
  const std::string broken = script("broken-gnuplot", "echo 'no pngcairo terminal' >&2\nexit 3\n");
  const auto [message, code] = error_of([&] {
    write_report(build_report(store_, "grid"), {out.string(), broken, "t"});
  });
  EXPECT_EQ(code, ExitCode::kEnvironment);
  EXPECT_NE(message.find("exit status 3"), std::string::npos) << message;
  EXPECT_NE(message.find("no pngcairo terminal"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(out / "index.html"));

  // Exits 0 without drawing.
  const std::string lazy = script("lazy-gnuplot", "exit 0\n");
  const auto [lazy_message, lazy_code] = error_of([&] {
    write_report(build_report(store_, "grid"), {out.string(), lazy, "t"});
  });
  EXPECT_EQ(lazy_code, ExitCode::kEnvironment);
  EXPECT_NE(lazy_message.find("did not write"), std::string::npos) << lazy_message;
}

// A relative --out (`amptune report --out report/` from a shell) is relative to the working
// directory, gnuplot's log too (gnuplot itself runs in the --out directory).
TEST_F(ReportTest, ARelativeOutDirectoryIsRelativeToTheWorkingDirectory) {
  add_fork_sweep();
  const ReportModel model = build_report(store_, "grid");
  const std::string gnuplot = fake_gnuplot();
  const fs::path before = fs::current_path();
  fs::current_path(dir_.path());
  const auto [message, code] = error_of([&] { write_report(model, {"rel/report", gnuplot, "t"}); });
  fs::current_path(before);
  EXPECT_EQ(code, ExitCode::kOk) << message;
  EXPECT_TRUE(fs::exists(dir_.path() / "rel" / "report" / "index.html"));
  EXPECT_TRUE(fs::exists(dir_.path() / "rel" / "report" / "gnuplot.log"));
  EXPECT_TRUE(fs::exists(dir_.path() / "rel" / "report" / "metric_vs_epoch.png"));
}

TEST_F(ReportTest, AnOutDirectoryThatCannotBeCreatedIsAnEnvironmentError) {
  add_fork_sweep();
  const std::string file = dir_.write("a-file", "x");
  const auto [message, code] = error_of([&] {
    write_report(build_report(store_, "grid"), {file + "/report", fake_gnuplot(), "t"});
  });
  EXPECT_EQ(code, ExitCode::kEnvironment);
  EXPECT_NE(message.find("cannot create the --out directory " + file + "/report"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace amptune::app
