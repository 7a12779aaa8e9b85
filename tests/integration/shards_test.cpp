// A sweep trained as shards (`amptune run --shard K/N`, one database each) and merged
// (`amptune merge`) by the real binary: the merged database compares exactly as the same sweep
// trained by one process; status and compare read the shards before they are merged; an
// interrupted shard continues from its database and merging again brings its new epochs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string shard_db(int k) { return "results/tiny.shard-" + std::to_string(k) + "-of-3.sqlite"; }

// `amptune compare --format json` rows without the measured img/s and MFU (timing differs run to
// run, the rest is deterministic: same seeds, same data order, one thread).
json compare_rows(const std::vector<std::string>& db_args, const std::string& dir) {
  std::vector<std::string> args = {"compare", "--sweep", "tiny", "--format", "json"};
  args.insert(args.end(), db_args.begin(), db_args.end());
  const Result r = run_amptune(args, dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  json rows = json::parse(r.out.empty() ? "[]" : r.out);
  for (auto& row : rows) row.erase("img_s"), row.erase("mfu");
  return rows;
}

// Every run's name, status and per-epoch values (ids and timestamps left out).
std::map<std::string, std::string> results_of(const std::string& db) {
  store::Store store(db);
  std::map<std::string, std::string> out;
  for (const auto& run : store.runs("tiny")) {
    std::string text = records::to_string(run.status) + " " + run.config_hash;
    for (const auto& e : store.epochs(run.id)) {
      text += " | " + std::to_string(e.epoch) + " loss " + std::to_string(e.train_loss) +
              " steps " + std::to_string(e.global_step);
      for (const auto& [name, value] : e.metrics) {
        if (name.rfind("train_fps", 0) != 0) text += " " + name + "=" + std::to_string(value);
      }
    }
    out[run.name] = text;
  }
  return out;
}

TEST(Shards, ThreeShardsMergedCompareAsOneProcess) {
  const TinySweep f =  // 6 cells, 2 epochs
      make_tiny_sweep(quick_tiny("grid:\n  optim.lr: [0.05, 0.2]\n  seed: [1, 2, 3]\n", 2));

  Result r = run_amptune({"run", f.yaml, "--db", "results/single.sqlite", "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // The shards' dry runs list disjoint cells that make up the sweep, two each.
  std::set<std::string> listed;
  std::vector<size_t> sizes(3);
  for (int k = 0; k < 3; ++k) {
    r = run_amptune(
        {"run", f.yaml, "--shard", std::to_string(k) + "/3", "--dry-run", "--skip-data"}, f.dir);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("shard " + std::to_string(k) + "/3: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("cells per shard: 0:2 1:2 2:2"), std::string::npos) << r.out;
    for (const auto& run : store::Store(f.dir + "/results/single.sqlite").runs("tiny")) {
      // Without the data the dry run prints config hashes (the identity before its data part).
      const std::string config_hash = Config::from_json(run.config_json, run.name).hash();
      if (r.out.find(config_hash.substr(0, 8)) == std::string::npos) continue;
      EXPECT_TRUE(listed.insert(run.name).second) << run.name << " in two shards";
      ++sizes[k];
    }
  }
  EXPECT_EQ(listed.size(), 6u);
  const int busy = static_cast<int>(std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
  const std::string busy_shard = std::to_string(busy) + "/3";

  // The busiest shard is interrupted after its first epoch (as a Slurm time limit would), the
  // others end.
  r = run_amptune({"run", f.yaml, "--shard", busy_shard, "--stop-after-epoch", "0", "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int k = 0; k < 3; ++k) {
    if (k == busy) continue;
    r = run_amptune({"run", f.yaml, "--shard", std::to_string(k) + "/3", "-q"}, f.dir);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  size_t cells = 0;
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(fs::exists(f.dir + "/" + shard_db(k))) << shard_db(k);
    cells += store::Store(f.dir + "/" + shard_db(k)).runs("tiny").size();
    EXPECT_TRUE(fs::is_directory(f.dir + "/results/checkpoints/tiny.shard-" + std::to_string(k) +
                                 "-of-3") ||
                store::Store(f.dir + "/" + shard_db(k)).runs("tiny").empty());
  }
  EXPECT_EQ(cells, 6u);
  EXPECT_FALSE(fs::exists(f.db)) << "no shard wrote the default database";

  // Status of the shards before merging: a glob, read as one.
  r = run_amptune({"status", "--db", "results/tiny.shard-*-of-3.sqlite"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const size_t interrupted = sizes[busy];
  EXPECT_NE(r.out.find("sweep tiny: 6 runs: done " + std::to_string(6 - interrupted)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("3 databases read as one"), std::string::npos) << r.err;

  // Merge what there is, then finish the interrupted shard from its database and merge again:
  // its runs replace their one-epoch copies.
  r = run_amptune(
      {"merge", shard_db(0), shard_db(1), shard_db(2), "--into", "results/merged.sqlite"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("6 runs added"), std::string::npos) << r.out;
  r = run_amptune({"run", f.yaml, "--shard", busy_shard, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& run : store::Store(f.dir + "/" + shard_db(busy)).runs("tiny")) {
    EXPECT_EQ(run.epochs_done, 2) << run.name;
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.name;
  }
  r = run_amptune({"merge", "results/tiny.shard-*-of-3.sqlite", "--into", "results/merged.sqlite"},
                  f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("0 runs added, " + std::to_string(interrupted) + " replaced, 0 kept, " +
                       std::to_string(6 - interrupted) + " already there"),
            std::string::npos)
      << r.out;

  // The same results as one process: every run's epochs and metrics, and the compare table
  // (merged, and the shards read as one before merging).
  const std::string merged = f.dir + "/results/merged.sqlite";
  EXPECT_EQ(results_of(merged), results_of(f.dir + "/results/single.sqlite"));
  const json single = compare_rows({"--db", "results/single.sqlite"}, f.dir);
  ASSERT_EQ(single.size(), 6u) << single.dump(1);
  EXPECT_EQ(compare_rows({"--db", "results/merged.sqlite"}, f.dir), single);
  EXPECT_EQ(compare_rows({"--db", shard_db(0), shard_db(1), shard_db(2)}, f.dir), single);
  EXPECT_EQ(store::Store(merged).integrity_check(), "ok");

  // Merging again changes nothing.
  r = run_amptune({"merge", "results/tiny.shard-*-of-3.sqlite", "--into", "results/merged.sqlite"},
                  f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("0 runs added, 0 replaced, 0 kept, 6 already there"), std::string::npos)
      << r.out;

  // The merged database's checkpoint paths lead to the shards' files: eval of a merged run
  // reads its checkpoint and reproduces the recorded accuracy.
  const records::RunRow run = store::Store(merged).runs("tiny").at(0);
  const double recorded = epochs_of(merged, run.name).at(1).metrics.at("acc1");
  r = run_amptune({"eval", run.name, "--epoch", "1", "--db", "results/merged.sqlite", "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(epochs_of(merged, run.name).at(1).metrics.at("acc1"), recorded);

  // A bad input is named, exit code 5, and the target is as it was.
  write_file(f.dir + "/results/notes.sqlite", "not a database");
  const auto before = results_of(merged);
  r = run_amptune({"merge", shard_db(0), "results/notes.sqlite", "--into", "results/merged.sqlite"},
                  f.dir);
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("results/notes.sqlite is not an SQLite database"), std::string::npos)
      << r.err;
  EXPECT_EQ(results_of(merged), before);
  r = run_amptune({"merge", "results/none-*.sqlite", "--into", "results/x.sqlite"}, f.dir);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("no file matches 'results/none-*.sqlite'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(f.dir + "/results/x.sqlite"));
}

// A run's identity is what it computes (docs/CONFIG.md "Identity"): the same sweep run on
// another node, with its own checkpoint folder, thread and loader counts, log interval and a copy
// of the data at another path, continues the same runs; other data make other runs, and a resume
// whose recorded data paths now hold other data is refused.
TEST(Identity, WhereFilesGoAndWhereTheDataLieMakeNoNewRuns) {
  const TinySweep f = make_tiny_sweep(quick_tiny("grid:\n  optim.lr: [0.05, 0.2]\n", 2));
  Result r = run_amptune({"run", f.yaml, "--stop-after-epoch", "0", "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, int64_t> ids;  // name -> id
  for (const auto& run : store::Store(f.db).runs("tiny")) {
    EXPECT_EQ(run.epochs_done, 1) << run.name;
    EXPECT_EQ(run.data_fingerprint.size(), 64u) << run.name;
    ids[run.name] = run.id;
  }
  ASSERT_EQ(ids.size(), 2u);

  fs::copy(f.dir + "/data", f.dir + "/copy", fs::copy_options::recursive);
  const std::vector<std::string> elsewhere = {
      "--set", "checkpoint.dir=" + f.dir + "/node2-ckpt", "--set", "threads=2", "--set",
      "data.workers=0", "--set", "log.every_steps=3", "--set", "data.root=" + f.dir + "/copy"};
  std::vector<std::string> args = {"run", f.yaml};
  args.insert(args.end(), elsewhere.begin(), elsewhere.end());
  r = run_amptune(args, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("trained with 1 threads and continues with 2"), std::string::npos) << r.err;
  std::map<std::string, int64_t> after;
  for (const auto& run : store::Store(f.db).runs("tiny")) {
    EXPECT_EQ(run.epochs_done, 2) << run.name;  // continued from its epoch-0 checkpoint
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.name;
    EXPECT_NE(run.config_json.find(f.dir + "/copy"), std::string::npos) << run.config_json;
    EXPECT_TRUE(fs::exists(f.dir + "/node2-ckpt/" + std::to_string(run.id) +
                           "/epoch_0001.safetensors"))
        << run.name;
    after[run.name] = run.id;
  }
  EXPECT_EQ(after, ids);

  // One label changed at the same path: other data, other runs.
  const std::string labels = f.dir + "/copy/train-labels-idx1-ubyte";
  std::string bytes = read_file(labels);
  bytes.back() = static_cast<char>((bytes.back() + 1) % 4);
  write_file(labels, bytes);
  args.insert(args.end(), {"--stop-after-epoch", "0", "-q"});
  r = run_amptune(args, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(store::Store(f.db).runs("tiny").size(), 4u);

  // The first runs' recorded paths now hold other data than they trained on: resume refuses.
  r = run_amptune({"resume", ids.begin()->first, "--from-epoch", "0"}, f.dir);
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("trained on other data than its data paths hold now"), std::string::npos)
      << r.err;
  EXPECT_EQ(store::Store(f.db).find_run(ids.begin()->first)->epochs_done, 2);
}

// A database the release before migration 12 wrote (tests/fixtures/schema11/README.md): opened by
// this binary its runs are re-hashed, keep their ids, names and lineage, the interrupted cell
// continues from its old checkpoint exactly as a fresh run of the cell trains, the finished one
// is skipped, asking for the same fork finds it, and its old checkpoints evaluate. Its
// checkpoints are in the old TorchScript format: they load with the opt-in
// AMPTUNE_TRUST_LEGACY_CHECKPOINTS=1 (given here) and are refused without it.
TEST(Identity, ADatabaseOfThePreviousReleaseContinuesWithItsRunsAndCheckpoints) {
  const std::vector<std::pair<std::string, std::string>> trust = {
      {"AMPTUNE_TRUST_LEGACY_CHECKPOINTS", "1"}};
  const std::string dir = scratch_dir("schema11");
  fs::copy(std::string(AMPTUNE_FIXTURE_DIR) + "/schema11", dir, fs::copy_options::recursive);
  const std::string db = dir + "/results/amptune.sqlite";
  Result r = run_amptune({"run", "sweep.yaml"}, dir, trust);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("migration 12 re-hashed 3 of 3 runs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 trained, 1 skipped"), std::string::npos) << r.err;
  // Run 2 continued from the old release's checkpoint of epoch 0 (its epoch 0 row is the old one).
  EXPECT_NE(r.err.find("continuing after epoch 0 (results/checkpoints/amptune/2/epoch_0000.pt)"),
            std::string::npos)
      << r.err;
  {
    store::Store store(db);
    const auto runs = store.runs("legacy");
    ASSERT_EQ(runs.size(), 3u);
    for (const auto& run : runs) {
      EXPECT_EQ(run.status, records::RunStatus::kDone) << run.name;
      EXPECT_EQ(run.epochs_done, 2) << run.name;
      EXPECT_FALSE(run.legacy_config_hash.empty()) << run.name;
    }
    EXPECT_EQ(store.find_run("legacy/0-f58bf14a")->id, 1);
    EXPECT_EQ(store.find_run("legacy/1-d159a863")->id, 2);
    const records::RunRow fork = *store.find_run("legacy/0-6c396737");
    ASSERT_TRUE(fork.fork);
    EXPECT_EQ(fork.fork->parent_run_id, 1);
    EXPECT_EQ(store.find_run(1)->data_fingerprint.size(), 64u);  // the cells met their data
  }
  // Run 2's epoch 1 continued from the old release's checkpoint of epoch 0: as a fresh run, up to
  // float rounding. The fixture's epoch 0 was computed on another machine and in channels_last;
  // this binary computes it in NCHW (oneDNN cannot run this model's 4-channel 1x1
  // stride-2 convolutions in channels_last, docs/MODELS.md) or with other CPU
  // kernels, so the weights it continues from differ from a fresh run's in the last bits (with
  // oneDNN held to AVX2 as every test is, cmake/amptune.cmake: 2e-7 at epoch 0, 1e-6 at epoch 1
  // on a Xeon with AVX-512 and AMX; unheld there, 2.2e-4 and 4.9e-3). Bitwise continuation within
  // one binary is Cli.ResumeEqualsStraight's and the other resume tests'.
  r = run_amptune({"run", "sweep.yaml", "--only", "optim.lr=0.2", "--db", "results/fresh.sqlite",
                   "-q"},
                  dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto resumed = epochs_of(db, "legacy/1-d159a863");
  const auto fresh = epochs_of(dir + "/results/fresh.sqlite", "1");
  ASSERT_EQ(resumed.size(), 2u);
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_NEAR(resumed[1].train_loss, fresh[1].train_loss, 1e-4 * std::abs(fresh[1].train_loss));
  EXPECT_EQ(resumed[1].metrics.at("acc1"), fresh[1].metrics.at("acc1"));

  // The same fork again is the migrated one; its old checkpoint evaluates to what it recorded.
  r = run_amptune({"fork", "legacy/0-f58bf14a", "--epoch", "0", "--set", "optim.lr=0.01"}, dir,
                  trust);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("fork legacy/0-6c396737 is already done"), std::string::npos) << r.out;
  const double recorded = epochs_of(db, "3").back().metrics.at("acc1");
  r = run_amptune({"eval", "3", "--epoch", "1", "-q"}, dir, trust);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(epochs_of(db, "3").back().metrics.at("acc1"), recorded);
  // The continued epoch was saved in the new format next to the old file.
  const auto continued = epochs_of(db, "legacy/1-d159a863");
  ASSERT_TRUE(continued[1].checkpoint);
  EXPECT_EQ(fs::path(continued[1].checkpoint->path).extension(), ".safetensors");
  const fs::path saved = continued[1].checkpoint->path;
  EXPECT_NE(read_file((saved.is_absolute() ? saved : dir / saved).string()).substr(0, 2), "PK");
}

// Without the opt-in the old checkpoints are refused with a message that says why and what to
// do: the interrupted run fails this time but stays pending with its epoch and its file, no
// checkpoint is written, deleted or changed, and the finished runs are untouched.
TEST(Identity, OldFormatCheckpointsAreRefusedWithoutTheOptIn) {
  const std::string dir = scratch_dir("schema11-refused");
  fs::copy(std::string(AMPTUNE_FIXTURE_DIR) + "/schema11", dir, fs::copy_options::recursive);
  const std::string db = dir + "/results/amptune.sqlite";
  const std::string checkpoints = dir + "/results/checkpoints";
  auto files = [&] {
    std::map<std::string, std::string> contents;
    for (const auto& e : fs::recursive_directory_iterator(checkpoints)) {
      // (the folder's .amptune-database mark, docs/SECURITY.md, is not a checkpoint)
      if (e.is_regular_file() && e.path().filename() != ".amptune-database") {
        contents[e.path().string()] = read_file(e.path().string());
      }
    }
    return contents;
  };
  const auto before = files();
  ASSERT_EQ(before.size(), 4u);
  const Result r =
      run_amptune({"run", "sweep.yaml"}, dir, {{"AMPTUNE_TRUST_LEGACY_CHECKPOINTS", "0"}});
  EXPECT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_NE(r.err.find("results/checkpoints/amptune/2/epoch_0000.pt is in the old TorchScript "
                       "format, which can run code when loaded; set "
                       "AMPTUNE_TRUST_LEGACY_CHECKPOINTS=1 if it comes from your own amptune"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("falling back"), std::string::npos) << r.err;
  EXPECT_TRUE(files() == before) << "checkpoint files changed";
  store::Store store(db);
  const records::RunRow run = *store.find_run("legacy/1-d159a863");
  EXPECT_EQ(run.status,
            records::RunStatus::kPending);  // the same command with the opt-in continues
  EXPECT_NE(run.message.find("AMPTUNE_TRUST_LEGACY_CHECKPOINTS"), std::string::npos) << run.message;
  const auto epochs = store.epochs(run.id);
  ASSERT_EQ(epochs.size(), 1u);
  ASSERT_TRUE(epochs[0].checkpoint);
  for (const char* done : {"legacy/0-f58bf14a", "legacy/0-6c396737"}) {
    EXPECT_EQ(store.find_run(done)->status, records::RunStatus::kDone) << done;
  }
}

}  // namespace
}  // namespace amptune::testing
