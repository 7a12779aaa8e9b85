// `amptune gc` (app/artifacts/checkpoint_folders.h): checkpoint files the database does not
// reference, on real files and a real database in a temp dir.
#include "app/artifacts/checkpoint_folders.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/hash.h"
#include "store/store.h"
#include "support/scratch.h"
#include "train/checkpoint_layout.h"

namespace amptune::app {
namespace {
namespace fs = std::filesystem;

class CheckpointGc : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::scratch_dir(); }
  std::string db() const { return (dir_ / "amptune.sqlite").string(); }

  static std::string write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

  // A done run with two epochs whose checkpoints exist at their recorded paths.
  records::RunRow make_run(store::Store& store, int cell, const std::string& ckpt_dir = "") {
    Config config;
    config.set("seed", cell);
    if (!ckpt_dir.empty()) config.set("checkpoint.dir", ckpt_dir);
    records::RunSpec spec;
    spec.cell_index = cell;
    spec.label = "cell " + std::to_string(cell);
    spec.config_json = config.canonical_json();
    spec.config_hash = config.hash();
    auto run = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec);
    const fs::path dir = train::checkpoint_dir(ckpt_dir, store.path(), run.id);
    for (int e = 0; e < 2; ++e) {
      const std::string bytes = "checkpoint " + std::to_string(run.id) + "/" + std::to_string(e);
      records::EpochRecord r;
      r.run_id = run.id;
      r.epoch = e;
      r.checkpoint =
          records::CheckpointFile{write(dir / ("epoch_000" + std::to_string(e) + ".pt"), bytes),
                                static_cast<int64_t>(bytes.size()), sha256_hex(bytes)};
      store.record_epoch(r);
    }
    store.finish_run(run.id, records::RunStatus::kDone, "", "");
    return *store.find_run(run.id);
  }

  fs::path dir_;
};

TEST_F(CheckpointGc, FindsOrphansTempFilesAndDeletedRunsAndNothingElse) {
  store::Store store(db());
  auto a = make_run(store, 0);
  auto b = make_run(store, 1, (dir_ / "elsewhere").string());
  const fs::path a_dir = dir_ / "checkpoints" / "amptune" / std::to_string(a.id);
  const fs::path b_dir = dir_ / "elsewhere" / std::to_string(b.id);
  // Retention deleted epoch 0 of run a in the database but the file survived (crash between).
  store.forget_checkpoint(a.id, 0);
  const std::string orphan = (a_dir / "epoch_0000.pt").string();
  const std::string tmp = write(a_dir / "epoch_0002.pt.tmp.4242", "half a save");
  const std::string stray = write(b_dir / "epoch_0009.pt", "nobody's");
  const std::string gone =
      write(dir_ / "checkpoints" / "amptune" / "999" / "epoch_0000.pt", "deleted run");
  // Never touched: files outside run directories, non-numeric directories.
  const std::string outside = write(dir_ / "checkpoints" / "amptune" / "notes.txt", "keep");
  const std::string named =
      write(dir_ / "checkpoints" / "amptune" / "backup" / "epoch_0000.pt", "keep");
  const std::string near = write(dir_ / "elsewhere" / "other.pt", "keep");

  auto dry = collect_garbage(store, /*dry_run=*/true);
  std::vector<std::string> listed;
  for (auto& f : dry.files) listed.push_back(f.path);
  std::vector<std::string> expected{orphan, tmp, gone, stray};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(dry.bytes, static_cast<int64_t>(fs::file_size(orphan) + fs::file_size(tmp) +
                                            fs::file_size(stray) + fs::file_size(gone)));
  for (auto& p : expected) EXPECT_TRUE(fs::exists(p)) << "dry run deleted " << p;

  auto real = collect_garbage(store, /*dry_run=*/false);
  EXPECT_EQ(real.bytes, dry.bytes);
  EXPECT_EQ(real.files.size(), 4u);
  for (auto& p : expected) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_FALSE(fs::exists(dir_ / "checkpoints" / "amptune" / "999"));
  for (auto& p : {outside, named, near}) EXPECT_TRUE(fs::exists(p)) << p;
  for (auto id : {a.id, b.id}) {
    for (auto& row : store.epochs(id)) {
      if (row.checkpoint) {
        EXPECT_TRUE(fs::exists(row.checkpoint->path)) << row.checkpoint->path;
      }
    }
  }
  EXPECT_TRUE(collect_garbage(store, false).files.empty());
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST_F(CheckpointGc, LeavesRunningRunsAndMovedCheckpointsAlone) {
  store::Store store(db());
  auto a = make_run(store, 0);
  auto b = make_run(store, 1);
  const fs::path a_dir = dir_ / "checkpoints" / "amptune" / std::to_string(a.id);
  const fs::path b_dir = dir_ / "checkpoints" / "amptune" / std::to_string(b.id);
  const std::string in_flight = write(a_dir / "epoch_0002.pt.tmp.77", "being written");
  store.mark_running(a.id, records::Provenance{});
  // Run b's recorded file is not where the database says: its directory is not trusted.
  fs::rename(b_dir / "epoch_0001.pt", b_dir / "moved.pt");
  auto report = collect_garbage(store, false);
  EXPECT_TRUE(report.files.empty());
  EXPECT_EQ(report.skipped.size(), 2u);
  EXPECT_TRUE(fs::exists(in_flight));
  EXPECT_TRUE(fs::exists(b_dir / "moved.pt"));
}

// The layout rule itself (train/checkpoint_layout.h), which gc, retention, the trainer and merge
// all go by.
TEST(CheckpointLayout, FoldersAndNamesOfADatabasesRuns) {
  EXPECT_EQ(train::default_checkpoint_root("results/amptune.sqlite"),
            "results/checkpoints/amptune");
  EXPECT_EQ(train::checkpoint_dir("", "results/amptune.sqlite", 12),
            "results/checkpoints/amptune/12");
  EXPECT_EQ(train::checkpoint_dir("/scratch/ckpt", "results/amptune.sqlite", 12),
            "/scratch/ckpt/12");
  EXPECT_EQ(train::configured_checkpoint_dir(R"({"checkpoint": {"dir": "ckpt"}})"), "ckpt");
  for (const char* none : {R"({"checkpoint": {"dir": 3}})", R"({"checkpoint": "ckpt"})", "{}",
                           "[1]", "not json"}) {
    EXPECT_EQ(train::configured_checkpoint_dir(none), "") << none;
  }
  EXPECT_EQ(train::checkpoint_file_name(4), "epoch_0004.safetensors");
  EXPECT_TRUE(train::is_checkpoint_file_name(train::checkpoint_file_name(12345)));
  for (const char* name : {"epoch_7", "epoch_0004.pt", "epoch_0004.safetensors"}) {
    EXPECT_TRUE(train::is_checkpoint_file_name(name)) << name;
  }
  for (const char* name : {"epoch_", "epoch_x.pt", "epoch_4x", "passwd", "Epoch_0004.pt"}) {
    EXPECT_FALSE(train::is_checkpoint_file_name(name)) << name;
  }
  // What merge is given: the folder under the input's default root, and the configured one.
  const records::CheckpointLayout layout = train::checkpoint_layout();
  EXPECT_EQ(layout.run_dirs("in/a.sqlite", 3, R"({"checkpoint": {"dir": "ckpt"}})"),
            (std::vector<std::string>{"in/checkpoints/a/3", "ckpt/3"}));
  EXPECT_EQ(layout.run_dirs("in/a.sqlite", 3, "{}"),
            (std::vector<std::string>{"in/checkpoints/a/3"}));
  EXPECT_TRUE(layout.is_checkpoint_name("epoch_0001.safetensors"));
  EXPECT_FALSE(layout.is_checkpoint_name("model.bin"));
}

}  // namespace
}  // namespace amptune::app
