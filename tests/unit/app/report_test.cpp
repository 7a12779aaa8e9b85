// Unit tests of the report (app/report.h): the model's series (a fork's lineage, loss-scale
// steps, img/s) from made-up runs, and the files write_report makes with a stand-in for gnuplot
// (a shell script that writes the PNG files the script names), without it, and when it fails.
#include "app/report.h"

#include <sys/stat.h>

#include <filesystem>
#include <limits>
#include <fstream>
#include <regex>
#include <sstream>

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
      if (epoch == 0) e.scale_events = {{0, 65536, "init"}, {5, 32768, "overflow"}};
      if (epoch == 1) e.scale_events = {{15, 65536, "growth"}};
      add_epoch(parent_, epoch, e);
    }
    finish(parent_);
    Run fork;
    fork.cell = 1;
    fork.axes = R"({"amp.loss_scale": 128})";
    fork.label = "fork";
    fork.fork = store::ForkOrigin{parent_, 1, R"({"amp.loss_scale": 128})",
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

TEST_F(ReportTest, LinePlotsStopAtTheMaximumNumberOfRuns) {
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
  EXPECT_EQ(model.throughput.size(), kMaxPlottedRuns + 1);  // the bar chart shows every run
  EXPECT_EQ(model.table.rows.size(), kMaxPlottedRuns + 1);
}

TEST_F(ReportTest, DiagnosedRunsPlotTheirNewestDiagnosisPerModule) {
  add_fork_sweep();
  auto rows = [](double first_cosine) {
    std::vector<store::DiagnosticRow> out;
    for (int batch = 0; batch < 2; ++batch) {
      for (int seq = 0; seq < 3; ++seq) {
        store::DiagnosticRow r;
        r.kind = "forward";
        r.batch = batch;
        r.seq = seq;
        r.module = "m" + std::to_string(seq);
        r.dtype = "fp16";
        r.numel = 8;
        // batch 1 is worse at seq 1; seq 2 lost to inf (NaN cosine) in batch 0
        r.cosine = seq == 0 ? first_cosine : seq == 1 ? (batch == 1 ? 0.9 : 0.99) : 1.0;
        if (seq == 2 && batch == 0) r.cosine = std::numeric_limits<double>::quiet_NaN();
        out.push_back(r);
      }
    }
    return out;
  };
  store::Diagnosis old_one;
  old_one.run_id = parent_;
  old_one.epoch = 1;
  old_one.batches = 2;
  old_one.rows = rows(0.5);
  store_.record_diagnosis(old_one);
  store::Diagnosis d = old_one;
  d.epoch = 3;
  d.rows = rows(1.0);
  store_.record_diagnosis(d);
  const ReportModel model = build_report(store_, "grid");
  ASSERT_EQ(model.module_error.size(), 1u);  // the fork was not diagnosed
  EXPECT_EQ(model.module_error[0].run_id, parent_);
  EXPECT_EQ(model.module_error[0].title, "parent, epoch 3");
  const Points& p = model.module_error[0].points;
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (std::pair<double, double>{0, 1e-12}));  // exact
  EXPECT_NEAR(p[1].second, 0.1, 1e-12);                     // the worst batch
  EXPECT_EQ(p[2].second, 1.0);  // lost to inf in one batch: the worst there is
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
  fork.fork = store::ForkOrigin{parent_id, 0, "{}", "", false};
  const int64_t fork_id = add_run(fork);
  store::EpochRecord own;
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
            "# parent\n0 65536.000000\n5 32768.000000\n15 65536.000000\n40 65536.000000\n\n\n");
  EXPECT_EQ(read(out / "throughput.dat"), "\"0: parent\" 115\n\"1: fork\" 50\n");
  EXPECT_NE(read(out / "report.gp").find("set ylabel 'acc1 (higher is better)'"),
            std::string::npos);
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
