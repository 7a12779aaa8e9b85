// A results database in a per-test scratch directory, filled with made-up sweeps, runs and
// epochs through the Store API (no training), and a raw second connection for what the API does
// not write (another host's claim, an old heartbeat).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/store.h"
#include "support/scratch.h"

namespace amptune::app {

class AppTest : public ::testing::Test {
 protected:
  AppTest() : path_((dir_.path() / "results.sqlite").string()), store_(path_) {}
  void TearDown() override { EXPECT_EQ(store_.integrity_check(), "ok"); }

  // Settings of one made-up run.
  struct Run {
    std::string sweep = "grid";
    int cell = 0;
    std::string axes = "{}";                     // swept values, a JSON object
    std::map<std::string, std::string> columns;  // setting columns as JSON text
    std::string label;                           // default: the axes
    std::optional<records::ForkOrigin> fork;
    std::string config = R"({"schedule":{"epochs":3}})";
  };

  int64_t add_run(const Run& run) {
    records::RunSpec spec;
    spec.sweep_name = run.sweep;
    spec.cell_index = run.cell;
    spec.label = run.label.empty() ? run.axes : run.label;
    spec.config_json = run.config;
    spec.config_hash = std::to_string(10000000 + next_hash_++) + run.sweep;  // 8 unique digits
    spec.axes_json = run.axes;
    spec.columns = run.columns;
    spec.fork = run.fork;
    return store_.ensure_run(store_.ensure_sweep(run.sweep, "", "", ""), spec).id;
  }

  // One epoch: train loss 2 - epoch / 4, global step 10 per epoch, the given metrics.
  struct Epoch {
    std::map<std::string, double> metrics;
    double fps = 100;
    double seconds = 10;
    std::vector<records::ScaleEvent> scale_events;
  };
  void add_epoch(int64_t run_id, int epoch, const Epoch& e) {
    records::EpochRecord record;
    record.run_id = run_id;
    record.epoch = epoch;
    record.global_step = 10 * (epoch + 1);
    record.lr = 0.1;
    record.train_loss = 2.0 - epoch / 4.0;
    record.train_fps_mean = record.train_fps_min = record.train_fps_max = e.fps;
    record.epoch_seconds = e.seconds;
    record.metrics = e.metrics;
    record.scale_events = e.scale_events;
    store_.record_epoch(record);
  }
  // Epochs 0, 1, ... with these values of `metric`.
  void add_epochs(int64_t run_id, const std::string& metric, const std::vector<double>& values,
                  double fps = 100) {
    for (size_t i = 0; i < values.size(); ++i) {
      Epoch e;
      e.metrics[metric] = values[i];
      e.fps = fps;
      add_epoch(run_id, static_cast<int>(i), e);
    }
  }
  void finish(int64_t run_id, records::RunStatus status = records::RunStatus::kDone) {
    store_.finish_run(run_id, status, "", "{}");
  }

  // Runs `sql` on a second connection to the database.
  void exec_raw(const std::string& sql) {
    sqlite3* db = nullptr;
    if (sqlite3_open(path_.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open " + path_);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    const std::string message = error ? error : "";
    sqlite3_free(error);
    sqlite3_close(db);
    if (rc != SQLITE_OK) throw std::runtime_error(message + " in " + sql);
  }

  testing::ScratchDir dir_;
  std::string path_;
  store::Store store_;

 private:
  int next_hash_ = 0;
};

}  // namespace amptune::app
