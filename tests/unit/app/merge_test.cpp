// app/run/merge.h: `amptune merge` around Store::merge (a target it created is removed when the
// merge fails) and several databases read as one (status and compare of shards before merging).
#include "app/run/merge.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "app/views/compare.h"
#include "app/views/status.h"
#include "core/error.h"
#include "support/scratch.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

// A shard database at `path` holding cells `cells` of sweep "grid" (acc1 = 10 x cell + epoch,
// `epochs` epochs, done), each cell with config hash "grid-cell<c>-<variant>".
void write_shard(const std::string& path, const std::vector<int>& cells, int epochs = 2,
                 const std::string& variant = "a") {
  store::Store store(path);
  const int64_t sweep = store.ensure_sweep("grid", "", "", "");
  for (int cell : cells) {
    records::RunSpec spec;
    spec.sweep_name = "grid";
    spec.cell_index = cell;
    spec.config_json = "{}";
    spec.config_hash = "grid-cell" + std::to_string(cell) + "-" + variant;
    spec.axes_json = "{\"optim.lr\":" + std::to_string(cell) + "}";
    const int64_t id = store.ensure_run(sweep, spec).id;
    for (int e = 0; e < epochs; ++e) {
      records::EpochRecord r;
      r.run_id = id;
      r.epoch = e;
      r.global_step = e + 1;
      r.metrics = {{"acc1", 10.0 * cell + e}};
      store.record_epoch(r);
    }
    store.finish_run(id, records::RunStatus::kDone, "", "{}");
  }
}

TEST(MergeDatabases, CreatesTheTargetOnlyWhenTheMergeSucceeds) {
  ScratchDir dir;
  const std::string a = (dir.path() / "a.sqlite").string();
  const std::string into = (dir.path() / "into.sqlite").string();
  write_shard(a, {0, 1});
  const std::string junk = dir.write("junk.sqlite", "not a database");
  EXPECT_THROW(merge_databases(into, {a, junk}), StoreError);
  EXPECT_FALSE(fs::exists(into)) << "a bad input must not create the target";

  // A failure found only while merging (a run of the same name with another config): the target
  // was created by then, and goes again.
  const std::string b = (dir.path() / "b.sqlite").string();
  write_shard(b, {0}, 2, "b");  // name grid/0-grid-cel, config hash differs from a's
  EXPECT_THROW(merge_databases(into, {a, b}), StoreError);
  EXPECT_FALSE(fs::exists(into));
  EXPECT_FALSE(fs::exists(into + "-wal"));

  EXPECT_EQ(merge_databases(into, {a}).inputs.at(0).runs_added, 2);
  EXPECT_THROW(merge_databases(into, {a, b}), StoreError);
  EXPECT_TRUE(fs::exists(into)) << "an existing target stays (unchanged)";
  EXPECT_EQ(store::Store(into).runs().size(), 2u);
}

TEST(OpenDatabases, SeveralAreReadAsOneWithoutWritingAnything) {
  ScratchDir dir;
  const std::string a = (dir.path() / "grid.shard-0-of-2.sqlite").string();
  const std::string b = (dir.path() / "grid.shard-1-of-2.sqlite").string();
  write_shard(a, {0, 2});
  write_shard(b, {1, 3}, 3);
  const std::string bytes_a = testing::read_file(a), bytes_b = testing::read_file(b);

  records::MergeReport report;
  const auto both = open_databases({a, b}, &report);
  EXPECT_EQ(both->path(), a + " + " + b + " (merged in memory)");
  EXPECT_EQ(report.inputs.size(), 2u);
  EXPECT_EQ(both->runs("grid").size(), 4u);
  const auto status = build_status(*both, std::string("grid"));
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].runs, 4);
  EXPECT_EQ(status[0].counts.at(records::RunStatus::kDone), 4);

  CompareOptions by_lr;
  by_lr.sweep = "grid";
  const CompareTable table = build_compare(*both, by_lr);
  ASSERT_EQ(table.rows.size(), 4u);
  EXPECT_EQ(table.rows[0].value, 32.0);  // cell 3, best epoch 2 (from b)
  EXPECT_EQ(table.rows[3].value, 1.0);   // cell 0 (from a)

  try {
    build_status(*both, std::string("nope"));
    ADD_FAILURE() << "unknown sweep";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("(merged in memory)"), std::string::npos) << e.what();
  }
  // The inputs are as they were (SQLite may leave the -wal / -shm side files of a WAL database
  // it read, as any reader does), and no other file was made.
  EXPECT_EQ(testing::read_file(a), bytes_a);
  EXPECT_EQ(testing::read_file(b), bytes_b);
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.rfind("grid.shard-", 0), 0u) << name;
  }

  EXPECT_EQ(open_databases({a})->path(), a);
  EXPECT_THROW(open_databases({(dir.path() / "none.sqlite").string()}), StoreError);
  EXPECT_FALSE(fs::exists(dir.path() / "none.sqlite"));
  EXPECT_THROW(open_databases({}), UsageError);
}

}  // namespace
}  // namespace amptune::app
