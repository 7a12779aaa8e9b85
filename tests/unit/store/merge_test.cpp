// Store::merge (amptune merge): shard databases written through the Store API are merged into
// a target in per-test temp directories; every table of the result is compared with its inputs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/embedded.h"
#include "core/error.h"
#include "store/migrations.h"
#include "store/store.h"
#include "unit/store/raw_exec.h"
#include "train/checkpoint_layout.h"
#include "support/errors.h"
#include "support/scratch.h"
#include "unit/store/typical_epoch.h"

namespace amptune::store {
using namespace records;  // the records the store takes and returns
namespace {

namespace fs = std::filesystem;
using Rows = std::vector<std::vector<std::optional<std::string>>>;

// Every row of every table of the database at `path`, in a fixed order: what "unchanged" means.
std::map<std::string, Rows> snapshot(const std::string& path) {
  Store store(path);
  std::map<std::string, Rows> tables;
  for (const std::string table : {"sweeps", "runs", "run_params", "epochs", "metrics",
                                  "loss_scale_events", "metric_info", "schema_version"}) {
    const std::string order = table == "metrics" ? "1, 2, 3" : "1, 2";
    tables[table] = store.query("SELECT * FROM " + table + " ORDER BY " + order).rows;
  }
  return tables;
}

// A shard database: runs of sweep "grid" with epochs, metrics, loss-scale events and claims.
class Shard {
 public:
  explicit Shard(const std::string& path) : store_(path) {
    sweep_ = store_.ensure_sweep("grid", "the grid", "name: grid\n", "grid.yaml");
  }
  // A cell (config hash "cell<cell>-<variant>...") with `epochs` recorded epochs.
  int64_t add(int cell, int epochs, RunStatus status = RunStatus::kDone,
              std::optional<ForkOrigin> fork = std::nullopt, const std::string& hash = "") {
    RunSpec spec;
    spec.sweep_name = "grid";
    spec.cell_index = cell;
    spec.label = "optim.lr=" + std::to_string(cell);
    // checkpoint.dir "ckpt": the epochs' files below lie in each run's own folder ckpt/<id>.
    spec.config_json = "{\"cell\":" + std::to_string(cell) + ",\"checkpoint\":{\"dir\":\"ckpt\"}}";
    spec.config_hash = hash.empty() ? "cell" + std::to_string(cell) + "0000000000" : hash;
    spec.axes_json = "{\"optim.lr\":" + std::to_string(cell) + ",\"seed\":1}";
    spec.columns = {{"opt_level", "\"O1\""}, {"lr", std::to_string(cell)}};
    spec.fork = fork;
    const int64_t id = store_.ensure_run(sweep_, spec).id;
    Provenance p;
    p.host = "node-" + std::to_string(cell);
    p.world_size = 2;
    store_.mark_running(id, p);  // this process becomes the holder (claim columns)
    store_.record_run_work(id,
                           {1e6 * (cell + 1), 2e11, "fp32", "cpu: node-" + std::to_string(cell)});
    for (int e = 0; e < epochs; ++e) {
      EpochRecord r =
          typical_epoch(id, e, "ckpt/" + std::to_string(id) + "/epoch_" + std::to_string(e));
      r.metrics["acc1"] = 10.0 * cell + e;
      r.checkpoint->sha256 = std::string(64, 'a' + e);
      store_.record_epoch(r);
    }
    if (status != RunStatus::kRunning && status != RunStatus::kPending) {
      store_.finish_run(id, status, "", "{\"cell\":" + std::to_string(cell) + "}");
    }
    return id;
  }
  Store& store() { return store_; }

 private:
  Store store_;
  int64_t sweep_ = 0;
};

// A run's contents without ids: what must survive the merge, read through the API.
struct RunContents {
  RunRow row;
  std::vector<EpochRow> epochs;
  std::vector<ScaleEvent> events;
  std::string params;
};
RunContents contents(const Store& store, const std::string& name) {
  RunContents c;
  auto row = store.find_run(name);
  EXPECT_TRUE(row) << name << " in " << store.path();
  if (!row) return c;
  c.row = *row;
  c.epochs = store.epochs(row->id);
  c.events = store.scale_events(row->id);
  const auto params = store.query(
      "SELECT key, value_json FROM run_params WHERE run_id = ?1 "
      "ORDER BY key",
      {std::to_string(row->id)});
  for (const auto& p : params.rows) c.params += *p[0] + "=" + *p[1] + ";";
  return c;
}

void expect_same_run(const Store& from, const Store& into, const std::string& name) {
  const RunContents a = contents(from, name), b = contents(into, name);
  EXPECT_EQ(a.row.config_hash, b.row.config_hash) << name;
  EXPECT_EQ(a.row.status, b.row.status) << name;
  EXPECT_EQ(a.row.label, b.row.label) << name;
  EXPECT_EQ(a.row.summary_json, b.row.summary_json) << name;
  EXPECT_EQ(a.row.started_at, b.row.started_at) << name;
  EXPECT_EQ(a.row.heartbeat_at, b.row.heartbeat_at) << name;
  EXPECT_EQ(a.row.columns, b.row.columns) << name;
  EXPECT_EQ(a.row.provenance.host, b.row.provenance.host) << name;
  EXPECT_EQ(a.row.provenance.world_size, b.row.provenance.world_size) << name;
  EXPECT_EQ(a.row.work.train_flops_per_sample, b.row.work.train_flops_per_sample) << name;
  EXPECT_EQ(a.row.work.peak_flops, b.row.work.peak_flops) << name;
  EXPECT_EQ(a.row.work.peak_precision, b.row.work.peak_precision) << name;
  EXPECT_EQ(a.row.work.peak_source, b.row.work.peak_source) << name;
  EXPECT_GT(b.row.work.peak_flops, 0) << name;
  ASSERT_EQ(a.row.holder.has_value(), b.row.holder.has_value()) << name;
  if (a.row.holder) {
    EXPECT_TRUE(*a.row.holder == *b.row.holder) << name;
  }
  EXPECT_EQ(a.params, b.params) << name;
  ASSERT_EQ(a.epochs.size(), b.epochs.size()) << name;
  for (size_t e = 0; e < a.epochs.size(); ++e) {
    EXPECT_EQ(a.epochs[e].metrics, b.epochs[e].metrics) << name << " epoch " << e;
    EXPECT_EQ(a.epochs[e].train_loss, b.epochs[e].train_loss) << name << " epoch " << e;
    EXPECT_EQ(a.epochs[e].recorded_at, b.epochs[e].recorded_at) << name << " epoch " << e;
    ASSERT_TRUE(a.epochs[e].checkpoint && b.epochs[e].checkpoint) << name;
    EXPECT_EQ(a.epochs[e].checkpoint->path, b.epochs[e].checkpoint->path) << name;
    EXPECT_EQ(a.epochs[e].checkpoint->sha256, b.epochs[e].checkpoint->sha256) << name;
  }
  ASSERT_EQ(a.events.size(), b.events.size()) << name;
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].global_step, b.events[i].global_step) << name;
    EXPECT_EQ(a.events[i].scale, b.events[i].scale) << name;
    EXPECT_EQ(a.events[i].reason, b.events[i].reason) << name;
  }
}

class MergeTest : public ::testing::Test {
 protected:
  // Crafting SQL's prefix for values a CHECK refuses.
  const std::string kUnchecked = "PRAGMA ignore_check_constraints = ON;";
  std::string path(const std::string& name) { return (dir_.path() / name).string(); }
  // An input amptune never writes: a shard of cells 1 and 2 (2 and 1 epochs) edited by `sql`
  // with foreign keys off.
  std::string crafted(const std::string& name, const std::string& sql) {
    const std::string file = path(name);
    {
      Shard s(file);
      s.add(1, 2);
      s.add(2, 1);
    }
    raw_exec(file, "PRAGMA foreign_keys = OFF;" + sql);
    return file;
  }
  // Each (input, expected) of `cases` merged after a good shard into a target that holds one
  // run: a StoreError naming the input and saying `expected`, and the target unchanged.
  void expect_each_refused(const std::vector<std::pair<std::string, std::string>>& cases) {
    const std::string good = path("good.sqlite"), into = path("into.sqlite");
    Shard(good).add(0, 1);
    Store(into).merge({good}, train::checkpoint_layout());
    const auto before = snapshot(into);
    for (const auto& [bad, expected] : cases) {
      const std::string message = testing::message_of<StoreError>([&] {
        Store(into).merge({good, bad}, train::checkpoint_layout());
      });
      EXPECT_NE(message.find(bad), std::string::npos) << message;
      EXPECT_NE(message.find(expected), std::string::npos) << bad << ": " << message;
      EXPECT_EQ(snapshot(into), before) << bad;
    }
  }
  testing::ScratchDir dir_;
};

TEST_F(MergeTest, CopiesEveryRunUnderNewIdsWithItsRowsAndForkParent) {
  const std::string a = path("grid.shard-0-of-2.sqlite"), b = path("grid.shard-1-of-2.sqlite");
  {
    Shard s(a);
    s.add(0, 3);
    s.add(2, 2, RunStatus::kRunning);  // still held: its claim comes along
  }
  int64_t parent_in_b = 0;
  {
    Shard s(b);
    parent_in_b = s.add(1, 3);
    s.add(3, 1, RunStatus::kFailed);
    ForkOrigin fork{parent_in_b, 1, "{\"optim.lr\":0.01}", "optim.lr: 1 -> 0.01", true};
    s.add(4, 2, RunStatus::kDone, fork);
  }
  // The target already holds another sweep's runs, so every id of the inputs moves.
  const std::string into = path("amptune.sqlite");
  {
    Store target(into);
    const int64_t other = target.ensure_sweep("other", "", "", "");
    for (int i = 0; i < 7; ++i) {
      RunSpec spec;
      spec.sweep_name = "other";
      spec.cell_index = i;
      spec.config_json = "{}";
      spec.config_hash = "other" + std::to_string(i) + "00000000";
      target.ensure_run(other, spec);
    }
  }
  Store target(into);
  const MergeReport report = target.merge({a, b}, train::checkpoint_layout());
  ASSERT_EQ(report.inputs.size(), 2u);
  EXPECT_EQ(report.inputs[0].runs_added, 2);
  EXPECT_EQ(report.inputs[1].runs_added, 3);
  EXPECT_EQ(report.inputs[0].sweeps_added, 1);
  EXPECT_EQ(report.inputs[1].sweeps_added, 0);
  EXPECT_EQ(report.inputs[0].epochs + report.inputs[1].epochs, 3 + 2 + 3 + 1 + 2);
  EXPECT_EQ(report.inputs[1].schema_version, target.schema_version());
  EXPECT_TRUE(report.conflicts.empty());
  EXPECT_EQ(report.checkpoints, 11);
  EXPECT_EQ(report.missing_checkpoints, 11);  // no such files here

  EXPECT_EQ(target.runs("grid").size(), 5u);
  EXPECT_EQ(target.runs("other").size(), 7u);
  Store shard_a(a), shard_b(b);
  for (const auto& run : shard_a.runs()) expect_same_run(shard_a, target, run.name);
  for (const auto& run : shard_b.runs()) {
    expect_same_run(shard_b, target, run.name);
    EXPECT_NE(target.find_run(run.name)->id, run.id) << "ids were not remapped";
  }
  // The fork's parent is the parent's new id, and its fork fields came along.
  const RunRow parent = *target.find_run(shard_b.find_run(parent_in_b)->name);
  const RunRow fork = *target.find_run("grid/4-cell4000");
  ASSERT_TRUE(fork.fork);
  EXPECT_EQ(fork.fork->parent_run_id, parent.id);
  EXPECT_EQ(fork.fork->parent_epoch, 1);
  EXPECT_TRUE(fork.fork->reset_optimizer);
  EXPECT_EQ(fork.fork->changes, "optim.lr: 1 -> 0.01");
  EXPECT_EQ(target.fork_epochs(parent.id), std::vector<int>{1});
  EXPECT_EQ(target.integrity_check(), "ok");
}

TEST_F(MergeTest, MergingAgainChangesNothing) {
  const std::string a = path("a.sqlite"), b = path("b.sqlite"), into = path("into.sqlite");
  {
    Shard s(a);
    s.add(0, 2);
    s.add(1, 1, RunStatus::kRunning);
  }
  {
    Shard s(b);
    const int64_t p = s.add(2, 3);
    s.add(5, 1, RunStatus::kDone, ForkOrigin{p, 0, "{}", "", false});
  }
  Store(into).merge({a, b}, train::checkpoint_layout());
  const auto before = snapshot(into);
  ASSERT_EQ(before.at("runs").size(), 4u);
  for (const auto& inputs : {std::vector<std::string>{a}, {b, a}, {a, a, b}}) {
    const MergeReport again = Store(into).merge(inputs, train::checkpoint_layout());
    EXPECT_TRUE(again.conflicts.empty());
    for (const auto& count : again.inputs) {
      EXPECT_EQ(count.runs_added + count.runs_replaced + count.runs_kept, 0) << count.path;
      EXPECT_GT(count.runs_unchanged, 0) << count.path;
      EXPECT_EQ(count.epochs, 0);
    }
    EXPECT_EQ(snapshot(into), before);
  }
}

TEST_F(MergeTest, TheCopyWithMoreEpochsIsKeptAndTheConflictNamed) {
  const std::string a = path("a.sqlite"), b = path("b.sqlite"), c = path("c.sqlite");
  const std::string into = path("into.sqlite");
  {
    Shard s(a);
    s.add(0, 2, RunStatus::kRunning);  // interrupted here ...
    s.add(1, 3);
    s.add(2, 2, RunStatus::kRunning);
  }
  {
    Shard s(b);
    s.add(0, 4);                       // ... finished elsewhere: kept
    s.add(1, 1, RunStatus::kRunning);  // fewer epochs: dropped
    s.add(2, 2);                       // tie, but finished: kept
  }
  {
    Shard s(c);
    s.add(2, 2, RunStatus::kFailed);  // tie, neither finished-vs-not: the copy there stays
  }
  // A fork of cell 0 in the target, made before the merge brings the better copy of cell 0.
  {
    Store target(into);
    target.merge({a}, train::checkpoint_layout());
    const RunRow cell0 = *target.find_run("grid/0-cell0000");
    RunSpec fork;
    fork.sweep_name = "grid";
    fork.cell_index = 9;
    fork.config_json = "{}";
    fork.config_hash = "fork9000000000";
    fork.fork = ForkOrigin{cell0.id, 1, "{}", "", false};
    target.ensure_run(cell0.sweep_id, fork);
  }
  Store target(into);
  const int64_t cell0_id = target.find_run("grid/0-cell0000")->id;
  const MergeReport report = target.merge({b, c}, train::checkpoint_layout());
  EXPECT_EQ(report.inputs[0].runs_replaced, 2);
  EXPECT_EQ(report.inputs[0].runs_kept, 1);
  EXPECT_EQ(report.inputs[1].runs_kept, 1);
  ASSERT_EQ(report.conflicts.size(), 4u);
  std::map<std::string, MergeConflict> by_run;
  for (const auto& conflict : report.conflicts)
    by_run[conflict.run + " " + conflict.dropped_from] = conflict;
  const MergeConflict& more = by_run.at("grid/0-cell0000 " + into);
  EXPECT_EQ(more.kept_from, b);
  EXPECT_EQ(more.kept_epochs, 4);
  EXPECT_EQ(more.dropped_epochs, 2);
  EXPECT_EQ(more.kept_status, "done");
  EXPECT_EQ(more.dropped_status, "running");
  const MergeConflict& fewer = by_run.at("grid/1-cell1000 " + b);
  EXPECT_EQ(fewer.kept_from, into);
  EXPECT_EQ(fewer.kept_epochs, 3);
  const MergeConflict& finished = by_run.at("grid/2-cell2000 " + into);
  EXPECT_EQ(finished.kept_from, b);
  EXPECT_EQ(finished.kept_status, "done");
  const MergeConflict& tie = by_run.at("grid/2-cell2000 " + c);
  EXPECT_EQ(tie.kept_from, b);  // the copy b brought earlier in this merge
  EXPECT_EQ(tie.dropped_status, "failed");

  Store shard_b(b), shard_a(a);
  expect_same_run(shard_b, target, "grid/0-cell0000");
  expect_same_run(shard_a, target, "grid/1-cell1000");
  expect_same_run(shard_b, target, "grid/2-cell2000");
  // Replaced in place: same id, so the fork made in the target still hangs on it.
  EXPECT_EQ(target.find_run("grid/0-cell0000")->id, cell0_id);
  EXPECT_EQ(target.find_run("grid/9-fork9000")->fork->parent_run_id, cell0_id);
  EXPECT_EQ(
      target.query("SELECT COUNT(*) FROM epochs WHERE run_id = ?1", {std::to_string(cell0_id)})
          .rows[0][0],
      "4");
  EXPECT_EQ(target.integrity_check(), "ok");
}

// A diagnosis with one forward row and one advice line.
void diagnose(Store& store, int64_t run_id, int epoch, double cosine) {
  Diagnosis d;
  d.run_id = run_id;
  d.epoch = epoch;
  d.batches = 1;
  d.loss_scale = 128;
  DiagnosticRow r;
  r.kind = DiagnosticKind::kForward;
  r.module = "conv1";
  r.dtype = TensorDtype::kFp16;
  r.numel = 4;
  r.cosine = cosine;
  d.rows = {r};
  d.advice = {{records::AdviceRule::kFirstDeparture, "conv1", "try amp.fp32_modules: [conv1]"}};
  store.record_diagnosis(d);
}

TEST_F(MergeTest, DiagnosesComeWithTheirRunAndAReplacedCopyBringsItsOwn) {
  const std::string a = path("a.sqlite"), b = path("b.sqlite"), into = path("into.sqlite");
  {
    Shard s(a);
    diagnose(s.store(), s.add(0, 1, RunStatus::kRunning), 0, 0.5);
    diagnose(s.store(), s.add(1, 1), -1, 0.25);
  }
  {
    Shard s(b);
    diagnose(s.store(), s.add(0, 2), 1, 0.75);  // more epochs: replaces a's copy
  }
  Store target(into);
  target.merge({a}, train::checkpoint_layout());
  target.merge({b}, train::checkpoint_layout());
  const auto rows = target
                        .query("SELECT r.cell_index, d.epoch, d.cosine, a.advice, g.loss_scale "
                               "FROM diagnostics d JOIN runs r ON r.id = d.run_id "
                               "JOIN diagnoses g ON g.run_id = d.run_id AND g.epoch = d.epoch "
                               "JOIN diagnosis_advice a ON a.run_id = d.run_id AND "
                               "a.epoch = d.epoch ORDER BY r.cell_index")
                        .rows;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::vector<std::optional<std::string>>{
                         "0", "1", "0.75", "try amp.fp32_modules: [conv1]", "128"}));
  EXPECT_EQ(rows[1][1], "-1");
  EXPECT_EQ(rows[1][2], "0.25");
  EXPECT_EQ(target.query("SELECT module FROM first_divergence ORDER BY run_id").rows.size(), 2u);
  target.merge({a, b}, train::checkpoint_layout());  // again: nothing changes
  EXPECT_EQ(target.query("SELECT COUNT(*) FROM diagnostics").rows[0][0], "2");
  EXPECT_EQ(target.integrity_check(), "ok");
}

// A pruned run comes with its prune decisions (new ids, the same order); a replaced copy brings
// its own and drops the target's.
TEST_F(MergeTest, PrunedRunsComeWithTheirDecisions) {
  const std::string a = path("a.sqlite"), b = path("b.sqlite"), into = path("into.sqlite");
  auto decision = [](int64_t run, int epoch, PruneAction action, const std::string& why) {
    PruneDecisionRow d;
    d.run_id = run;
    d.epoch = epoch;
    d.action = action;
    d.rule = PruneRule::kAsha;
    d.metric = "acc1";
    d.value = 1;
    d.threshold = 2;
    d.reason = why;
    return d;
  };
  {
    Shard s(a);
    const int64_t id = s.add(0, 1, RunStatus::kRunning);
    s.store().prune_run(decision(id, 0, PruneAction::kStop, "a stops"));
    ASSERT_TRUE(s.store().promote_run(decision(id, 0, PruneAction::kContinue, "a promotes")));
    s.store().mark_running(id, Provenance{});
    s.store().prune_run(decision(id, 0, PruneAction::kStop, "a stops again"));
    s.add(1, 1);
  }
  {
    Shard s(b);
    const int64_t id = s.add(2, 3, RunStatus::kRunning);
    s.store().prune_run(decision(id, 2, PruneAction::kStop, "b stops"));
  }
  Store target(into);
  target.merge({b, a}, train::checkpoint_layout());
  const auto pruned = target.find_run("grid/0-cell0000");
  ASSERT_TRUE(pruned);
  EXPECT_EQ(pruned->status, RunStatus::kPruned);
  std::vector<std::string> reasons;
  for (const auto& d : target.prune_decisions(pruned->id)) reasons.push_back(d.reason);
  EXPECT_EQ(reasons, (std::vector<std::string>{"a stops", "a promotes", "a stops again"}));
  EXPECT_EQ(target.prune_decisions(target.find_run("grid/2-cell2000")->id).size(), 1u);
  EXPECT_EQ(target.query("SELECT run, stopped_after_epoch FROM pruned_runs ORDER BY run").rows,
            (std::vector<std::vector<std::optional<std::string>>>{{"grid/0-cell0000", "0"},
                                                                  {"grid/2-cell2000", "2"}}));
  target.merge({a, b}, train::checkpoint_layout());  // again: nothing changes
  EXPECT_EQ(target.query("SELECT COUNT(*) FROM prune_decisions").rows[0][0], "4");
  EXPECT_EQ(target.integrity_check(), "ok");
}

// The runs a decision compared its run with (compared_json) are input run ids: they follow their
// runs to the target's ids. A compared_json of another shape, a run the input lacks, or a rung
// of another type is refused naming the file, the table, the row and the column.
TEST_F(MergeTest, PruneDecisionsNameTheComparedRunsByTheirTargetIds) {
  const std::string a = path("a.sqlite"), into = path("into.sqlite");
  {
    Shard s(into);  // the target's ids 1 and 2 are taken
    s.add(7, 1);
    s.add(8, 1);
  }
  int64_t pruned = 0, other = 0;
  {
    Shard s(a);
    other = s.add(1, 2);
    pruned = s.add(2, 1, RunStatus::kRunning);
    PruneDecisionRow d;
    d.run_id = pruned;
    d.action = PruneAction::kStop;
    d.rule = PruneRule::kMedian;
    d.metric = "acc1";
    d.compared_json = "[{\"run_id\":" + std::to_string(other) + ",\"value\":11.0}]";
    s.store().prune_run(d);
  }
  const auto before = snapshot(into);
  const std::string c = path("c.sqlite");
  fs::copy_file(a, c);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"UPDATE prune_decisions SET compared_json = '[{\"run_id\": 99, \"value\": 1}]'",
       "table prune_decisions, row 1, column compared_json names run 99, which the file does "
       "not have"},
      {"UPDATE prune_decisions SET compared_json = '{\"run_id\": 1}'",
       "table prune_decisions, row 1, column compared_json is not a JSON array"},
      {"UPDATE prune_decisions SET rung = 'abc'", "prune_decisions.rung holds a text value (row 1)"},
  };
  for (const auto& [change, expected] : cases) {
    fs::copy_file(c, a, fs::copy_options::overwrite_existing);
    raw_exec(a, change);
    const std::string message = testing::message_of<StoreError>(
        [&] { Store(into).merge({a}, train::checkpoint_layout()); });
    EXPECT_NE(message.find(a), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << change << ": " << message;
    EXPECT_EQ(snapshot(into), before) << change;
  }
  fs::copy_file(c, a, fs::copy_options::overwrite_existing);
  Store target(into);
  target.merge({a}, train::checkpoint_layout());
  const int64_t merged = target.find_run("grid/2-cell2000")->id;
  const int64_t compared = target.find_run("grid/1-cell1000")->id;
  ASSERT_NE(compared, other);
  const auto decisions = target.prune_decisions(merged);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].compared_json,
            "[{\"run_id\":" + std::to_string(compared) + ",\"value\":11.0}]");
}

TEST_F(MergeTest, BadInputsAreNamedAndNothingIsWritten) {
  const std::string good = path("good.sqlite"), into = path("into.sqlite");
  Shard(good).add(0, 1);
  {
    Shard s(into);
    s.add(7, 1);
  }
  const auto before = snapshot(into);

  const std::string text = path("notes.sqlite");
  testing::write_file(text, "these are notes, not a database\n");
  const std::string empty = path("empty.sqlite");
  testing::write_file(empty, "");
  const std::string other = path("other.sqlite");
  raw_exec(other, "CREATE TABLE foo (x); INSERT INTO foo VALUES (1)");
  const std::string newer = path("newer.sqlite");
  Shard(newer).add(1, 1);
  raw_exec(newer, "INSERT INTO schema_version VALUES (99, '2030-01-01T00:00:00.000Z')");
  // A real shard whose pages are overwritten after the header: a corrupt file.
  const std::string corrupt = path("corrupt.sqlite");
  {
    Shard s(corrupt);
    for (int cell = 0; cell < 40; ++cell) s.add(cell, 2);
  }
  raw_exec(corrupt, "PRAGMA wal_checkpoint(TRUNCATE)");
  {
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 * 3);
    const std::string junk(4096 * 4, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const std::string missing = path("missing.sqlite");

  const std::vector<std::pair<std::string, std::string>> cases = {
      {text, "is not an SQLite database"},
      {empty, "is not an amptune database"},
      {other, "is not an amptune database"},
      {newer, "newer amptune (schema 99 >"},
      {corrupt, "is corrupt"},
      {missing, "does not exist"},
      {into, "is the database merged into"},
      {dir_.path().string(), "is not a file"},
  };
  for (const auto& [bad, expected] : cases) {
    const std::string message = testing::message_of<StoreError>([&] {
      Store(into).merge({good, bad}, train::checkpoint_layout());
    });
    EXPECT_NE(message.find(bad), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << bad << ": " << message;
    EXPECT_EQ(snapshot(into), before) << bad;
  }
  EXPECT_FALSE(fs::exists(missing));  // opened read-only: never created
  EXPECT_EQ(Store(into).merge({good}, train::checkpoint_layout()).inputs.at(0).runs_added, 1);
}

// Inputs crafted with SQL: what an amptune database never holds is refused before anything is
// copied, naming the file, the table and the row; the target stays as it was.
TEST_F(MergeTest, InputsOfAStructureAmptuneNeverWritesAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {crafted("cycle.sqlite", "UPDATE runs SET parent_run_id = id, parent_epoch = 0 WHERE id = 1"),
       "run 1's fork parents lead back to itself"},
      {crafted("cycle2.sqlite",
               "UPDATE runs SET parent_run_id = 2, parent_epoch = 0 WHERE id = 1;"
               "UPDATE runs SET parent_run_id = 1, parent_epoch = 0 WHERE id = 2"),
       "fork parents lead back to itself"},
      {crafted("view.sqlite",
               "DROP TABLE loss_scale_events; DROP TABLE metrics; DROP TABLE epochs;"
               "CREATE VIEW epochs AS WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
               "FROM x) SELECT n AS run_id, n AS epoch FROM x"),
       "epochs is a view, not a table"},
      {crafted("text.sqlite", "UPDATE runs SET cell_index = 'abc' WHERE id = 2"),
       "runs.cell_index holds a text value (row 2)"},
      {crafted("twice.sqlite",
               "PRAGMA legacy_alter_table = ON; CREATE TABLE copy AS SELECT * FROM runs; DROP TABLE runs;"
               "ALTER TABLE copy RENAME TO runs; INSERT INTO runs SELECT * FROM runs WHERE id = 1"),
       "runs has id 1 twice"},
  };
  expect_each_refused(cases);
}

// Rows that break a constraint of the target's schema (CHECK, NOT NULL, UNIQUE, FOREIGN KEY),
// crafted with the checks off: refused naming the input, the table, the input's row and the
// column, the target unchanged. Before, the message named only the target and SQLite's words.
TEST_F(MergeTest, RowsBreakingTheSchemaAreRefusedNamingTheRowAndColumn) {
  // run_params again without its constraints (SQLite enforces NOT NULL and UNIQUE always).
  const std::string bare_params =
      "PRAGMA legacy_alter_table = ON; CREATE TABLE copy AS SELECT * FROM run_params;"
      "DROP TABLE run_params;"
      "ALTER TABLE copy RENAME TO run_params;";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {crafted("status.sqlite", kUnchecked + "UPDATE runs SET status = 'bogus' WHERE id = 2"),
       "table runs, row 2, column status breaks the schema (CHECK constraint failed: status IN"},
      {crafted("sweep.sqlite", kUnchecked + "UPDATE sweeps SET name = ''"),
       "table sweeps, row 1, column name breaks the schema (CHECK constraint failed"},
      {crafted("reason.sqlite",
               kUnchecked + "UPDATE loss_scale_events SET reason = 'whim' WHERE rowid = 2"),
       "table loss_scale_events, row 2, column reason breaks the schema (CHECK"},
      {crafted("metric.sqlite", kUnchecked + "UPDATE metrics SET name = 'Acc 1' WHERE rowid = 3"),
       "table metrics, row 3, column name breaks the schema (CHECK constraint failed: "
       "metric_name_is_identifier_not_epochs_column)"},
      {crafted("null.sqlite", bare_params + "UPDATE run_params SET key = NULL WHERE rowid = 2"),
       "table run_params, row 2, column key breaks the schema (NOT NULL constraint failed: "
       "run_params.key)"},
      {crafted("twice.sqlite", bare_params + "INSERT INTO run_params SELECT * FROM run_params "
                                             "WHERE rowid = 1"),
       "table run_params, row 5, column run_id, key breaks the schema (UNIQUE constraint failed"},
      {crafted("orphan.sqlite", "INSERT INTO metrics VALUES (1, 7, 'acc1', 0.5)"),
       "table metrics, row 19, column run_id, epoch breaks the schema (FOREIGN KEY constraint "
       "failed)"},
  };
  expect_each_refused(cases);
}

// Numbers the readers could not take (an epoch past an int, a negative count, a text where a
// number belongs) are refused by merge itself, naming the row and the column, before anything
// is copied; the target stays as it was.
TEST_F(MergeTest, NumbersOutsideTheReadersRangeAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {crafted("epoch.sqlite", "UPDATE epochs SET epoch = 2147483648 WHERE rowid = 2"),
       "table epochs, row 2, column epoch holds 2147483648, outside [0, 2147483646]"},
      {crafted("negative.sqlite", kUnchecked + "UPDATE epochs SET epoch = -1 WHERE rowid = 1"),
       "table epochs, row 1, column epoch holds -1, outside [0, 2147483646]"},
      {crafted("cell.sqlite", "UPDATE runs SET cell_index = 4294967296 WHERE id = 1"),
       "table runs, row 1, column cell_index holds 4294967296, outside [0, 2147483647]"},
      {crafted("parent.sqlite",
               "UPDATE runs SET parent_run_id = 1, parent_epoch = 2147483647 WHERE id = 2"),
       "table runs, row 2, column parent_epoch holds 2147483647, outside [0, 2147483646]"},
      {crafted("scale.sqlite", "UPDATE loss_scale_events SET epoch = -2 WHERE rowid = 1"),
       "table loss_scale_events, row 1, column epoch holds -2"},
      {crafted("metric.sqlite", "UPDATE metrics SET epoch = 3000000000 WHERE rowid = 4"),
       "table metrics, row 4, column epoch holds 3000000000"},
      {crafted("fps.sqlite", "UPDATE epochs SET train_fps_mean = 'fast' WHERE rowid = 1"),
       "epochs.train_fps_mean holds a text value (row 1)"},
      {crafted("threads.sqlite", "UPDATE runs SET threads = 'many' WHERE id = 1"),
       "runs.threads holds a text value (row 1)"},
      {crafted("peak.sqlite", "UPDATE runs SET peak_flops = 'fast' WHERE id = 1"),
       "runs.peak_flops holds a text value (row 1)"},
  };
  expect_each_refused(cases);
}

// What Store(into).merge(inputs, train::checkpoint_layout()) throws, found in a child process given
// 60 s: an input that makes merge read forever fails the test ("<still merging after 60 s>")
// instead of hanging it.
std::string merge_refusal(const std::string& into, const std::vector<std::string>& inputs) {
  const std::string out = into + ".refusal";
  const pid_t pid = ::fork();
  if (pid == 0) {
    {
      std::ofstream(out) << testing::message_of<StoreError>(
          [&] { Store(into).merge(inputs, train::checkpoint_layout()); });
    }
    ::_exit(0);
  }
  for (int tenths = 0; tenths < 600; ++tenths) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return testing::read_file(out);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return "<still merging after 60 s>";
}

// SQLite does not tell names apart by case: a view "EPOCHS" is what `FROM epochs` reads, a
// column "CELL_INDEX" is what "cell_index" names. Such an input is refused as the lower-case
// spelling is (a recursive view would otherwise be read forever), naming the file and table.
TEST_F(MergeTest, NamesAreMatchedAsSqliteMatchesThem) {
  const std::string good = path("good.sqlite"), into = path("into.sqlite");
  Shard(good).add(0, 1);
  Store(into).merge({good}, train::checkpoint_layout());
  const auto before = snapshot(into);
  const std::string forever =
      " AS WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM x) "
      "SELECT n AS run_id, n AS epoch, n AS global_step FROM x";
  const std::string no_epochs =
      "DROP TABLE loss_scale_events; DROP TABLE metrics; DROP TABLE epochs;";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {crafted("upper.sqlite", no_epochs + "CREATE VIEW EPOCHS" + forever),
       "epochs is a view, not a table (\"EPOCHS\" in its schema)"},
      {crafted("mixed.sqlite", no_epochs + "CREATE VIEW Epochs" + forever),
       "epochs is a view, not a table (\"Epochs\" in its schema)"},
      {crafted("runs.sqlite", "DROP TABLE runs; CREATE VIEW RUNS AS WITH RECURSIVE x(n) AS "
                              "(SELECT 1 UNION ALL SELECT n + 1 FROM x) SELECT n AS id FROM x"),
       "runs is a view, not a table (\"RUNS\" in its schema)"},
      {crafted("virtual.sqlite",
               "DROP TABLE diagnosis_advice; CREATE VIRTUAL TABLE Diagnosis_Advice USING "
               "fts4(run_id, epoch, seq, rule, module, advice)"),
       "diagnosis_advice is a virtual table, not a table"},
      {crafted("column.sqlite", "ALTER TABLE runs RENAME COLUMN cell_index TO CELL_INDEX;"
                                "UPDATE runs SET CELL_INDEX = 'abc' WHERE id = 2"),
       "runs.cell_index holds a text value (row 2)"},
  };
  for (const auto& [bad, expected] : cases) {
    const std::string message = merge_refusal(into, {good, bad});
    EXPECT_NE(message.find(bad), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << bad << ": " << message;
    EXPECT_EQ(snapshot(into), before) << bad;
  }
}

// A checkpoint path outside the input run's own folder is not taken over as a checkpoint.
TEST_F(MergeTest, CheckpointPathsOutsideTheRunsFolderAreMergedAsDeleted) {
  const std::string a = path("a.sqlite"), into = path("into.sqlite");
  int64_t id = 0;
  {
    Shard s(a);
    id = s.add(0, 3);
  }
  raw_exec(a, "UPDATE epochs SET checkpoint_path = '/etc/passwd' WHERE epoch = 0;"
              "UPDATE epochs SET checkpoint_path = 'ckpt/" + std::to_string(id) +
                  "/notes.txt' WHERE epoch = 1");
  Store target(into);
  const MergeReport report = target.merge({a}, train::checkpoint_layout());
  EXPECT_EQ(report.foreign_checkpoints, 2);
  EXPECT_EQ(report.first_foreign, "/etc/passwd");
  EXPECT_EQ(report.checkpoints, 1);
  const auto epochs = target.epochs(target.find_run("grid/0-cell0000")->id);
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_FALSE(epochs[0].checkpoint);
  EXPECT_FALSE(epochs[1].checkpoint);
  ASSERT_TRUE(epochs[2].checkpoint);
  EXPECT_EQ(epochs[0].metrics, contents(Store(a), "grid/0-cell0000").epochs[0].metrics);
}

// The lineage view ends on a database whose parent links form a cycle (edited by hand).
TEST_F(MergeTest, TheLineageViewEndsOnACycle) {
  const std::string a = path("a.sqlite");
  Shard(a).add(0, 2);
  raw_exec(a, "UPDATE runs SET parent_run_id = id, parent_epoch = 1");
  const auto rows = Store(a).query("SELECT count(*) FROM lineage").rows;
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(std::stoll(*rows[0][0]), 0);
}

TEST_F(MergeTest, AFailureHalfWayRollsEverythingBack) {
  // Two runs named grid/0-cell0000 with different config hashes (same 8-character prefix):
  // found only while copying the second input, after the first was copied.
  const std::string a = path("a.sqlite"), b = path("b.sqlite"), into = path("into.sqlite");
  Shard(a).add(3, 2);
  {
    Shard s(b);
    s.add(0, 1, RunStatus::kDone, std::nullopt, "cell0000XXXXXXXX");
  }
  {
    Shard s(into);
    s.add(0, 1);
  }
  const auto before = snapshot(into);
  const std::string message = testing::message_of<StoreError>([&] {
    Store(into).merge({a, b}, train::checkpoint_layout());
  });
  EXPECT_NE(message.find("grid/0-cell0000"), std::string::npos) << message;
  EXPECT_NE(message.find(b), std::string::npos) << message;
  EXPECT_NE(message.find("different configurations"), std::string::npos) << message;
  EXPECT_EQ(snapshot(into), before);
  EXPECT_EQ(Store(into).integrity_check(), "ok");
}

TEST_F(MergeTest, CheckpointPathsAreKeptAsRecordedAndCheckedFromHere) {
  const std::string a = path("a.sqlite"), into = path("into.sqlite");
  int64_t id = 0;
  {
    Shard s(a);
    id = s.add(0, 2);
    s.store().forget_checkpoint(id, 0);  // retention deleted epoch 0's file
  }
  // The checkpoint of epoch 1 exists (relative to the working directory, as training records it).
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_.path());
  testing::write_file("ckpt/" + std::to_string(id) + "/epoch_1", "weights");
  Store target(into);
  const MergeReport report = target.merge({a}, train::checkpoint_layout());
  fs::current_path(cwd);
  EXPECT_EQ(report.checkpoints, 1);  // the deleted one does not count
  EXPECT_EQ(report.missing_checkpoints, 0);
  const auto epochs = target.epochs(target.find_run("grid/0-cell0000")->id);
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_FALSE(epochs[0].checkpoint);
  ASSERT_TRUE(epochs[1].checkpoint);
  EXPECT_EQ(epochs[1].checkpoint->path, "ckpt/" + std::to_string(id) + "/epoch_1");
}

TEST_F(MergeTest, AnOlderSchemaMergesByTheColumnsItHas) {
  // A database of migrations 1-2 only (no precision columns, loss-scale events, forks, claims).
  const std::string old = path("old.sqlite"), into = path("into.sqlite");
  const auto migrations = parse_migrations(embedded::store_sql);
  raw_exec(old,
           "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);" +
               migrations[0].sql + migrations[1].sql +
               "INSERT INTO schema_version VALUES (1, 't'), (2, 't');"
               "INSERT INTO sweeps (name, created_at, updated_at) VALUES ('old', 't', 't');"
               "INSERT INTO runs (sweep_id, name, cell_index, label, status, config_json, "
               "config_hash, created_at, lr) VALUES (1, 'old/0-aaaaaaaa', 0, 'base', 'done', "
               "'{}', 'aaaaaaaaaaaa', 't', 0.1);"
               "INSERT INTO epochs (run_id, epoch, global_step, recorded_at) VALUES "
               "(1, 0, 10, 't'), (1, 1, 20, 't');"
               "INSERT INTO metrics VALUES (1, 1, 'acc1', 55.5);"
               "INSERT INTO metric_info VALUES ('my_error', 0, 'mine');");
  Store target(into);
  const MergeReport report = target.merge({old}, train::checkpoint_layout());
  EXPECT_EQ(report.inputs.at(0).schema_version, 2);
  const RunRow run = *target.find_run("old/0-aaaaaaaa");
  EXPECT_EQ(run.status, RunStatus::kDone);
  EXPECT_EQ(run.epochs_done, 2);
  EXPECT_EQ(run.columns.at("lr"), "0.1");
  EXPECT_FALSE(run.columns.count("opt_level"));
  EXPECT_FALSE(run.fork);
  EXPECT_FALSE(run.holder);
  EXPECT_EQ(target.epochs(run.id).at(1).metrics.at("acc1"), 55.5);
  EXPECT_EQ(target.higher_is_better("my_error"), false);
  EXPECT_EQ(target.integrity_check(), "ok");
}

}  // namespace
}  // namespace amptune::store
