// Store::copy_runs (a run and its fork ancestors into a task database of `tune --slurm`), the
// merge back of what the task trained (the results database's own checkpoint records kept), and
// the tune_jobs rows of migration 21.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "store/store.h"
#include "support/scratch.h"
#include "train/checkpoint_layout.h"
#include "unit/store/typical_epoch.h"

namespace amptune::store {
using namespace records;
namespace {

struct Fixture {
  testing::ScratchDir dir;
  std::string path(const std::string& name) const { return (dir.path() / name).string(); }
};

// Run `cell` of sweep "tune" with `epochs` epochs whose checkpoints lie in its default folder.
int64_t add_run(Store& store, int cell, int epochs, std::optional<ForkOrigin> fork = {}) {
  const int64_t sweep = store.ensure_sweep("tune", "", "name: tune\n", "tune.yaml");
  RunSpec spec;
  spec.sweep_name = "tune";
  spec.cell_index = cell;
  spec.config_json = "{\"cell\":" + std::to_string(cell) + "}";
  spec.config_hash = "cell" + std::to_string(cell) + "0000000000";
  spec.fork = fork;
  const int64_t id = store.ensure_run(sweep, spec).id;
  for (int e = 0; e < epochs; ++e) {
    const std::string dir = train::checkpoint_dir("", store.path(), id);
    EpochRecord r = typical_epoch(id, e, dir + "/" + train::checkpoint_file_name(e));
    r.checkpoint->sha256 = std::string(64, static_cast<char>('a' + e));
    store.record_epoch(r);
  }
  return id;
}

TEST(CopyRuns, ARunComesWithItsAncestorsAndAConfigRewrittenForItAlone) {
  Fixture f;
  const std::string main = f.path("amptune.sqlite"), task = f.path("task.sqlite");
  Store store(main);
  const int64_t start = add_run(store, 1, 3);
  add_run(store, 2, 3);  // not asked for
  const int64_t fork =
      add_run(store, 3, 0, ForkOrigin{start, 1, "{\"amp.loss_scale\":\"dynamic\"}", "", false});
  Store copy(task);
  copy.copy_runs(main, {fork}, [](const std::string&) { return std::string("{\"moved\":1}"); });
  const auto runs = copy.runs("tune");
  ASSERT_EQ(runs.size(), 2u);
  const RunRow parent = *copy.find_run(store.find_run(start)->name);
  const RunRow child = *copy.find_run(store.find_run(fork)->name);
  ASSERT_TRUE(child.fork);
  EXPECT_EQ(child.fork->parent_run_id, parent.id);
  EXPECT_EQ(child.config_json, "{\"moved\":1}");
  EXPECT_EQ(parent.config_json, "{\"cell\":1}");
  // The parent's checkpoints are copied as recorded, though they lie in the other database's
  // folder: the task forks from them.
  const auto epochs = copy.epochs(parent.id);
  ASSERT_EQ(epochs.size(), 3u);
  ASSERT_TRUE(epochs[1].checkpoint);
  EXPECT_EQ(epochs[1].checkpoint->path, store.epochs(start)[1].checkpoint->path);
  EXPECT_EQ(copy.integrity_check(), "ok");
}

TEST(CopyRuns, ARunTrainedFurtherElsewhereKeepsTheCheckpointsTheTargetRecorded) {
  Fixture f;
  const std::string main = f.path("amptune.sqlite"), task = f.path("task.sqlite");
  Store store(main);
  const int64_t id = add_run(store, 1, 2);
  const std::string name = store.find_run(id)->name;
  std::string trained;  // the file of epoch 2, in the task database's own folder
  {
    Store copy(task);
    copy.copy_runs(main, {id}, nullptr);
    const int64_t there = copy.find_run(name)->id;
    trained = train::checkpoint_dir("", task, there) + "/" + train::checkpoint_file_name(2);
    copy.record_epoch(typical_epoch(there, 2, trained));
  }
  const MergeReport report = store.merge({task}, train::checkpoint_layout());
  EXPECT_EQ(report.foreign_checkpoints, 0);
  const auto epochs = store.epochs(id);
  ASSERT_EQ(epochs.size(), 3u);
  for (const EpochRow& e : epochs) EXPECT_TRUE(e.checkpoint) << "epoch " << e.epoch;
  EXPECT_EQ(epochs[0].checkpoint->path,
            train::checkpoint_dir("", main, id) + "/" + train::checkpoint_file_name(0));
  EXPECT_EQ(epochs[2].checkpoint->path, trained);
}

TEST(CopyRuns, AnEarlierEpochPointingElsewhereIsStillMergedAsDeleted) {
  Fixture f;
  const std::string main = f.path("amptune.sqlite"), other = f.path("other.sqlite");
  Store store(main);
  const int64_t id = add_run(store, 1, 2);
  {
    Store copy(other);
    copy.copy_runs(main, {id}, nullptr);
  }
  {
    // The input's epoch 0 names another file than the one this database recorded.
    Store copy(other);
    const int64_t there = copy.find_run(store.find_run(id)->name)->id;
    EpochRecord r = typical_epoch(there, 0, "/etc/passwd");
    copy.record_epoch(r);
    copy.record_epoch(typical_epoch(
        there, 2, train::checkpoint_dir("", other, there) + "/" + train::checkpoint_file_name(2)));
  }
  const MergeReport report = store.merge({other}, train::checkpoint_layout());
  EXPECT_EQ(report.foreign_checkpoints, 1);
  const auto epochs = store.epochs(id);
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_FALSE(epochs[0].checkpoint);
  EXPECT_TRUE(epochs[1].checkpoint);  // the same file as recorded here
  EXPECT_TRUE(epochs[2].checkpoint);
}

TEST(TuneJobs, RowsRoundTripAndEndOnce) {
  Fixture f;
  Store store(f.path("amptune.sqlite"));
  const int64_t run = add_run(store, 1, 0);
  const int64_t sweep = store.ensure_sweep("tune", "", "name: tune\n", "tune.yaml");
  TuneSearchRow search;
  search.sweep_id = sweep;
  search.block_json = "{}";
  search.metric = "train_loss";
  search.reference_run_id = run;
  search.start_run_id = run;
  search = store.ensure_tune_search(search);
  TuneJobRow job;
  job.search_id = search.id;
  job.run_id = run;
  job.epoch = 1;
  job.job_id = "812";
  job.task = 3;
  job.task_db = "/shared/t.sqlite";
  job.log_path = "/shared/t.out";
  store.record_tune_jobs({job});
  auto rows = store.tune_jobs(search.id);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].job_id, "812");
  EXPECT_EQ(rows[0].task, 3);
  EXPECT_EQ(rows[0].state, "SUBMITTED");
  EXPECT_TRUE(rows[0].ended_at.empty());
  EXPECT_FALSE(rows[0].submitted_at.empty());
  rows[0].state = "CANCELLED by 0";
  store.update_tune_job(rows[0]);
  EXPECT_TRUE(store.tune_jobs(search.id)[0].ended_at.empty());
  rows[0].ended_at = "now";
  store.update_tune_job(rows[0]);
  const std::string ended = store.tune_jobs(search.id)[0].ended_at;
  EXPECT_FALSE(ended.empty());
  store.update_tune_job(rows[0]);
  EXPECT_EQ(store.tune_jobs(search.id)[0].ended_at, ended);  // ended once
  EXPECT_EQ(store.tune_jobs(search.id)[0].state, "CANCELLED by 0");
  job.attempt = 0;
  EXPECT_THROW(store.record_tune_jobs({job}), StoreError);  // CHECK (attempt >= 1)
}

}  // namespace
}  // namespace amptune::store
