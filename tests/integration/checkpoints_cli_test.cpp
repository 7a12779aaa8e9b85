// End-to-end tests of `amptune eval`, `amptune export`, `amptune gc`, checkpoint.keep_epochs, the
// fallback past a malformed checkpoint and Python's reading of checkpoint files, with the real
// binary on tiny IDX data. Each test works in its own scratch directory.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/hash.h"
#include "integration/harness.h"
#include "store/store.h"
#include "unit/store/raw_exec.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

using Fixture = TinySweep;

// `schedule` adds schedule keys (", key: value"), `extra` base lines (two-space indented).
Fixture make(int epochs, const std::string& schedule = "", const std::string& extra = "",
             const std::string& model = TinyOptions().model) {
  TinyOptions o;
  o.name = "ckpt";
  o.epochs = epochs;
  o.schedule += schedule;
  o.base = extra;
  o.model = model;
  return make_tiny_sweep(o);
}

void train(const Fixture& f) {
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

int64_t only_run(const Fixture& f) {
  store::Store s(f.db);
  auto runs = s.runs();
  EXPECT_EQ(runs.size(), 1u);
  return runs.empty() ? 0 : runs[0].id;
}

// Rows of a query on the database, each column as text ("NULL" for NULL).
std::vector<std::vector<std::string>> query(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
      << sqlite3_errmsg(raw);
  std::vector<std::vector<std::string>> out;
  while (st && sqlite3_step(st) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      const unsigned char* t = sqlite3_column_text(st, i);
      row.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
    out.push_back(row);
  }
  sqlite3_finalize(st);
  sqlite3_close(raw);
  return out;
}

std::string sha_of(const std::string& path) { return sha256_hex(read_file(path)); }

// Puts `bytes` in the place of epoch `epoch`'s checkpoint of run `run`, with the row's size and
// sha256 made to match (a file replaced together with its row, or merged in from elsewhere).
void replace_checkpoint(const Fixture& f, const std::string& run, int epoch,
                        const std::string& bytes) {
  const auto rows = epochs_of(f.db, run);
  ASSERT_TRUE(rows.at(static_cast<size_t>(epoch)).checkpoint);
  const std::string path = rows[static_cast<size_t>(epoch)].checkpoint->path;
  write_file(path, bytes);
  store::raw_exec(f.db, "UPDATE epochs SET checkpoint_bytes = " + std::to_string(bytes.size()) +
                            ", checkpoint_sha256 = '" + sha_of(path) + "' WHERE run_id = " + run +
                            " AND epoch = " + std::to_string(epoch));
}

// Trains `f` (3 epochs) and stops after epoch 1: `run` is its run's id, `rows` its two epoch
// rows, each with a checkpoint.
void train_two_of_three(const Fixture& f, std::string& run, std::vector<records::EpochRow>& rows) {
  const auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "1"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  run = std::to_string(only_run(f));
  rows = epochs_of(f.db, run);
  ASSERT_EQ(rows.size(), 2u);
}

// A newest checkpoint whose header is malformed while its recorded size and sha256 match (a file
// replaced together with its row, or merged in): resume refuses it as a CheckpointError, falls
// back to the epoch before, and trains the same epoch again to the same bytes.
TEST(CheckpointsCli, MalformedNewestCheckpointWithAMatchingHashFallsBack) {
  auto f = make(3);
  std::string run;
  std::vector<records::EpochRow> before;
  ASSERT_NO_FATAL_FAILURE(train_two_of_three(f, run, before));
  const std::string newest = before[1].checkpoint->path;
  std::string bytes = read_file(newest);
  const size_t at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"F99\"");
  replace_checkpoint(f, run, 1, bytes);

  auto r = run_amptune({"resume", run, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(newest + ": tensor"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown dtype \"F99\"; falling back to the previous checkpoint"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("continuing after epoch 0"), std::string::npos) << r.err;
  const auto after = epochs_of(f.db, run);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[1].train_loss, before[1].train_loss);
  EXPECT_EQ(after[1].metrics.at("acc1"), before[1].metrics.at("acc1"));
  ASSERT_TRUE(after[1].checkpoint);
  EXPECT_EQ(after[1].checkpoint->sha256, before[1].checkpoint->sha256);  // the same file again
}

// A checkpoint whose metadata names another position than its row (epoch 0's file copied over
// epoch 1's, row updated to match): eval refuses it with exit 6 instead of evaluating epoch 0's
// weights as epoch 1's; resume falls back to epoch 0 instead of continuing after the file's epoch.
TEST(CheckpointsCli, ACheckpointOfAnotherEpochIsRefused) {
  auto f = make(3);
  std::string run;
  std::vector<records::EpochRow> before;
  ASSERT_NO_FATAL_FAILURE(train_two_of_three(f, run, before));
  replace_checkpoint(f, run, 1, read_file(before[0].checkpoint->path));

  auto r = run_amptune({"eval", run, "--epoch", "1", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_NE(
      r.err.find("says it ends epoch 0 at step " + std::to_string(before[0].global_step) +
                 ", its database row epoch 1 at step " + std::to_string(before[1].global_step)),
      std::string::npos)
      << r.err;
  EXPECT_EQ(epochs_of(f.db, run)[1].metrics, before[1].metrics);  // nothing stored

  r = run_amptune({"resume", run, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("falling back to the previous checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("continuing after epoch 0"), std::string::npos) << r.err;
  const auto after = epochs_of(f.db, run);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[1].train_loss, before[1].train_loss);  // epoch 1 trained again, the same
}

// A tensor whose shape has a million dimensions (of 1, so the bytes still match): refused at the
// 17th dimension with a short message, by eval (exit 6) and by a resume from that epoch, whose
// failure message stored in runs.message stays short too. (It cost 1.9 GB and a message of
// megabytes, stored whole, before.)
TEST(CheckpointsCli, AShapeOfAMillionDimensionsGivesAShortRefusal) {
  auto f = make(2);
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run = std::to_string(only_run(f));
  const std::string bytes = read_file(epochs_of(f.db, run).at(1).checkpoint->path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  auto& shape = header.at("model.fc.bias").at("shape");
  for (int i = 0; i < 1'000'000; ++i) shape.push_back(1);
  const std::string text = header.dump();
  std::string crafted(8, '\0');
  const uint64_t length = text.size();
  std::memcpy(crafted.data(), &length, 8);
  replace_checkpoint(f, run, 1, crafted + text + bytes.substr(8 + n));

  r = run_amptune({"eval", run, "--epoch", "1", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 6) << r.err.substr(0, 2000);
  EXPECT_NE(r.err.find("tensor \"model.fc.bias\" has more than 16 dimensions"), std::string::npos)
      << r.err.substr(0, 2000);
  EXPECT_LT(r.err.size(), 2000u) << r.err.substr(0, 2000);

  r = run_amptune({"resume", run, "--from-epoch", "1", "--db", f.db}, f.dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.err.size(), 4000u) << r.err.substr(0, 2000);
  const auto message = query(f.db, "SELECT status, message FROM runs WHERE id = " + run);
  ASSERT_EQ(message.size(), 1u);
  EXPECT_EQ(message[0][0], "failed");
  EXPECT_NE(message[0][1].find("more than 16 dimensions"), std::string::npos)
      << message[0][1].substr(0, 2000);
  EXPECT_LT(message[0][1].size(), 1000u) << message[0][1].substr(0, 2000);
}

bool python_safetensors() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch, safetensors.torch' "
                                     ">/dev/null 2>&1") == 0;
  return ok;
}

// A checkpoint is a plain safetensors file: Python's safetensors package (PyPI; tools/
// install-deps.sh installs it) reads it, and its model.* tensors are the weights `amptune export`
// writes for the same epoch (a fp32 run: the same values and dtypes).
TEST(CheckpointsCli, PythonSafetensorsReadsACheckpointAsExportWritesIt) {
  if (!python_safetensors()) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and the safetensors package missing (not in "
                    "Debian 12; tools/install-deps.sh installs it from PyPI, which needs network)";
  }
  auto f = make(1);
  train(f);
  const std::string run = std::to_string(only_run(f));
  const auto rows = epochs_of(f.db, run);
  ASSERT_EQ(rows.size(), 1u);
  const std::string out = f.dir + "/weights.pt";
  auto r = run_amptune({"export", run, "--epoch", "0", "--out", out, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string script = f.dir + "/check.py", report = f.dir + "/report.txt";
  write_file(script,
             "import sys, torch\n"
             "from safetensors import safe_open\n"
             "from safetensors.torch import load_file\n"
             "ckpt = load_file(sys.argv[1])\n"
             "with safe_open(sys.argv[1], framework='pt') as f:\n"
             "    meta = f.metadata()\n"
             "sd = torch.load(sys.argv[2])\n"
             "model = {k[len('model.'):]: v for k, v in ckpt.items() if k.startswith('model.')}\n"
             "same = sorted(model) == sorted(sd) and all(\n"
             "    model[k].dtype == sd[k].dtype and torch.equal(model[k], sd[k]) for k in sd)\n"
             "with open(sys.argv[3], 'w') as out:\n"
             "    out.write('%s %s %s %s %s\\n' % (len(sd) > 40, same, meta['format'], meta['epoch'],\n"
             "              meta['optimizer']))\n");
  const std::string cmd = "/usr/bin/python3 " + script + " " + rows[0].checkpoint->path + " " +
                          out + " " + report;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(read_file(report), "True True amptune-checkpoint-2 0 sgd\n");
}

TEST(CheckpointsCli, EvalAllReproducesTrainingTimeMetricsBitwise) {
  // O2 evaluates with its fp16-grid weights under emulation, as training-time evaluation did.
  auto f = make(2, "", "grid:\n  amp.opt_level: [O0, O2]\n");
  train(f);
  store::Store db(f.db);
  const auto runs = db.runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& cell : runs) {
    const std::string id = std::to_string(cell.id);
    const auto trained = epochs_of(f.db, id);
    ASSERT_EQ(trained.size(), 2u);
    auto r = run_amptune({"eval", id, "--all", "--db", f.db, "-q"}, f.dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("acc1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("recorded"), std::string::npos) << r.out;
    const auto evaluated = epochs_of(f.db, id);
    ASSERT_EQ(evaluated.size(), 2u);
    for (size_t e = 0; e < 2; ++e) {
      for (const char* m : {"acc1", "acc5", "val_loss", "val_samples"}) {
        ASSERT_TRUE(trained[e].metrics.count(m)) << m;
        EXPECT_EQ(evaluated[e].metrics.at(m), trained[e].metrics.at(m))
            << cell.label << " epoch " << e << " " << m;
      }
      EXPECT_EQ(evaluated[e].metrics.at("val_samples"), 48.0);  // the whole split
      // Everything else the trainer recorded is untouched.
      EXPECT_EQ(evaluated[e].metrics, trained[e].metrics);
      EXPECT_EQ(evaluated[e].recorded_at, trained[e].recorded_at);
    }
  }
  const std::string run = std::to_string(runs[0].id);

  // Default: the newest checkpoint only.
  auto r = run_amptune({"eval", run, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\n1 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n0 "), std::string::npos) << r.out;

  // An epoch without a checkpoint: named, with the saved ones, non-zero exit.
  r = run_amptune({"eval", run, "--epoch", "7", "--db", f.db}, f.dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("epoch 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("saved epochs: 0, 1"), std::string::npos) << r.err;
  EXPECT_EQ(db.integrity_check(), "ok");
}

TEST(CheckpointsCli, EvalKeepsTheSetTrainingEvaluated) {
  // Training evaluates 1 batch (16 of 48 samples) per epoch.
  auto f = make(1, ", eval_step_per_epoch: 1");
  train(f);
  const std::string run = std::to_string(only_run(f));
  const auto trained = epochs_of(f.db, run);
  ASSERT_EQ(trained.size(), 1u);
  ASSERT_EQ(trained[0].metrics.at("val_samples"), 16.0);
  // By default eval evaluates the same set: the same figures, bitwise.
  auto r = run_amptune({"eval", run, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(epochs_of(f.db, run)[0].metrics, trained[0].metrics);
  // The whole split is another set: never silently stored over the training-time figures.
  r = run_amptune({"eval", run, "--max-batches", "-1", "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("computed on 16 samples, this evaluation on 48"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--replace"), std::string::npos) << r.err;
  EXPECT_EQ(epochs_of(f.db, run)[0].metrics, trained[0].metrics);
  r = run_amptune({"eval", run, "--max-batches", "-1", "--replace", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(epochs_of(f.db, run)[0].metrics.at("val_samples"), 48.0);
}

TEST(CheckpointsCli, EvalFillsMetricsOfRunsTrainedWithoutEvaluation) {
  auto f = make(2, ", eval_step_per_epoch: 0");
  train(f);
  const int64_t id = only_run(f);
  const std::string run = std::to_string(id);
  for (auto& e : epochs_of(f.db, run)) EXPECT_FALSE(e.metrics.count("acc1"));
  EXPECT_TRUE(query(f.db, "SELECT best_epoch FROM best_epoch WHERE run_id = " + run).empty());

  auto r = run_amptune({"eval", run, "--all", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = epochs_of(f.db, run);
  ASSERT_EQ(rows.size(), 2u);
  for (auto& e : rows) {
    ASSERT_TRUE(e.metrics.count("acc1")) << "epoch " << e.epoch;
    EXPECT_EQ(e.metrics.at("val_samples"), 48.0);
  }
  const int best = rows[1].metrics.at("acc1") > rows[0].metrics.at("acc1") ? 1 : 0;
  auto view = query(f.db, "SELECT best_epoch, metric FROM best_epoch WHERE run_id = " + run);
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0][0], std::to_string(best));
  EXPECT_EQ(view[0][1], "acc1");

  // --max-batches limits the evaluation (1 batch of 16 samples); it would replace metrics of
  // 48 samples, so it is printed, not stored, unless --replace.
  r = run_amptune({"eval", run, "--epoch", "0", "--max-batches", "1", "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("computed on 48 samples, this evaluation on 16"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("not stored"), std::string::npos) << r.out;
  EXPECT_EQ(epochs_of(f.db, run)[0].metrics.at("val_samples"), 48.0);
  r = run_amptune({"eval", run, "--epoch", "0", "--max-batches", "1", "--replace", "--db", f.db,
                   "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(epochs_of(f.db, run)[0].metrics.at("val_samples"), 16.0);

  // A corrupt checkpoint: named with its epoch, the other still evaluated, non-zero exit.
  const std::string first = rows[0].checkpoint->path;
  fs::resize_file(first, fs::file_size(first) / 2);
  r = run_amptune({"eval", run, "--all", "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_NE(r.err.find("epoch_0000.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("epoch 0"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recorded"), std::string::npos) << r.out;  // epoch 1
  EXPECT_EQ(epochs_of(f.db, run)[0].metrics.at("val_samples"), 16.0);  // left as it was
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

TEST(CheckpointsCli, KeepEpochsSurvivesKeepLast) {
  auto f = make(4, "", "  checkpoint: {keep_last: 1, keep_epochs: [1]}\n");
  train(f);
  const std::string run = std::to_string(only_run(f));
  auto rows = epochs_of(f.db, run);
  ASSERT_EQ(rows.size(), 4u);
  for (auto& e : rows) {
    const bool kept = e.epoch == 1 || e.epoch == 3;
    EXPECT_EQ(e.checkpoint.has_value(), kept) << "epoch " << e.epoch;
    const std::string file = f.dir + "/results/checkpoints/amptune/" + run + "/epoch_000" +
                             std::to_string(e.epoch) + ".safetensors";
    EXPECT_EQ(fs::exists(file), kept) << file;
  }
  auto view = query(f.db, "SELECT epoch FROM checkpoints WHERE run_id = " + run +
                              " AND deleted_at IS NULL ORDER BY epoch");
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[0][0], "1");
  EXPECT_EQ(view[1][0], "3");
  // A negative entry is a config error.
  auto bad = make(1, "", "  checkpoint: {keep_epochs: [-1]}\n");
  auto r = run_amptune({"run", bad.yaml, "--db", bad.db}, bad.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("keep_epochs"), std::string::npos) << r.err;
}

TEST(CheckpointsCli, RetentionNeverDeletesACheckpointAForkStartsFrom) {
  auto f = make(3, "", "  checkpoint: {keep_last: 1}\ngrid:\n  optim.lr: [0.05, 0.1]\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "0"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int64_t parent = 0, child = 0;
  {
    store::Store s(f.db);
    auto runs = s.runs();
    ASSERT_EQ(runs.size(), 2u);
    parent = runs[0].id;
    child = runs[1].id;
  }
  // Cell 1 forks from cell 0's epoch 0 (as `amptune fork` records it); only cell 0 trains on.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(f.db.c_str(), &raw), SQLITE_OK);
  const std::string sql = "UPDATE runs SET parent_run_id = " + std::to_string(parent) +
                          ", parent_epoch = 0 WHERE id = " + std::to_string(child);
  ASSERT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  r = run_amptune({"run", f.yaml, "--db", f.db, "-q", "--only", "optim.lr=0.05"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = epochs_of(f.db, std::to_string(parent));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].checkpoint.has_value()) << "the fork's start was deleted";
  EXPECT_FALSE(rows[1].checkpoint.has_value()) << "keep_last 1 should delete epoch 1";
  EXPECT_TRUE(rows[2].checkpoint.has_value());
  EXPECT_TRUE(fs::exists(rows[0].checkpoint->path));
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

// Runs `binary` (the other LibTorch build's amptune) with `args` in `cwd`; its exit code.
int run_binary(const std::string& binary, std::vector<std::string> args, const std::string& cwd) {
  args.insert(args.begin(), binary);
  return wait_exit_code(spawn_program(args, cwd, SpawnOptions({}, "other")));
}

// A checkpoint written by one LibTorch build continues in the other, both ways: Debian's 1.13
// and PyTorch 2.x from pip (AMPTUNE_OTHER_BINARY: tools/test.sh --torch pip sets it to build/'s
// binary; skipped without it). Checkpoints are safetensors tensors with JSON metadata, written
// and read by amptune's own code, so the LibTorch version does not enter the format.
TEST(CheckpointsCli, CrossVersionCheckpointsResumeInTheOtherBuild) {
  const char* other = std::getenv("AMPTUNE_OTHER_BINARY");
  if (!other || !*other) {
    GTEST_SKIP() << "AMPTUNE_OTHER_BINARY is not set (tools/test.sh --torch pip sets it to the "
                    "Debian build's amptune)";
  }
  for (const bool other_first : {true, false}) {
    SCOPED_TRACE(other_first ? "other build first" : "this build first");
    const Fixture f = make(2);
    const std::vector<std::string> first = {"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch",
                                            "0"};
    ASSERT_EQ(other_first ? run_binary(other, first, f.dir) : run_amptune(first, f.dir).exit_code,
              0)
        << read_file(f.dir + "/other.err");
    const std::vector<std::string> rest = {"run", f.yaml, "--db", f.db, "-q"};
    const int code =
        other_first ? run_amptune(rest, f.dir).exit_code : run_binary(other, rest, f.dir);
    ASSERT_EQ(code, 0) << read_file(f.dir + "/other.err");
    store::Store s(f.db);
    const auto runs = s.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, records::RunStatus::kDone) << runs[0].message;
    const auto epochs = s.epochs(runs[0].id);
    ASSERT_EQ(epochs.size(), 2u);
    EXPECT_TRUE(std::isfinite(epochs[1].train_loss));
  }
}

TEST(CheckpointsCli, HelpAndUsageErrors) {
  const std::string dir = scratch_dir();
  for (const char* cmd : {"eval", "export", "gc"}) {
    auto r = run_amptune({cmd, "--help"}, dir);
    EXPECT_EQ(r.exit_code, 0) << cmd << r.err;
    EXPECT_NE(r.out.find(std::string("usage: amptune ") + cmd), std::string::npos) << r.out;
  }
  const std::string db = dir + "/none.sqlite";
  EXPECT_EQ(run_amptune({"eval", "1", "--epoch", "0", "--all", "--db", db}, dir).exit_code, 2);
  EXPECT_EQ(run_amptune({"eval", "--db", db}, dir).exit_code, 2);  // no RUN
  EXPECT_EQ(run_amptune({"eval", "1", "--db", db}, dir).exit_code, 5);  // no database yet
  EXPECT_EQ(run_amptune({"export", "1", "--epoch", "0", "--db", db}, dir).exit_code, 2);
  auto r = run_amptune({"gc", "--db", db}, dir);
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("none.sqlite"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(db));
}

TEST(CheckpointsCli, GcDeletesExactlyTheUnreferencedFiles) {
  auto f = make(2);
  train(f);
  const std::string run = std::to_string(only_run(f));
  const std::string ckpt = f.dir + "/results/checkpoints/amptune/" + run;
  std::map<std::string, std::string> referenced;  // path -> sha256
  for (auto& e : epochs_of(f.db, run)) {
    ASSERT_TRUE(e.checkpoint);
    referenced[e.checkpoint->path] = sha_of(e.checkpoint->path);
  }
  const std::vector<std::string> planted{
      ckpt + "/epoch_0001.safetensors.tmp.31337",              // interrupted save
      ckpt + "/epoch_0005.safetensors",                        // no epoch row
      f.dir + "/results/checkpoints/amptune/4242/epoch_0000.safetensors",  // run 4242 does not exist
  };
  for (auto& p : planted) {
    fs::create_directories(fs::path(p).parent_path());
    write_file(p, std::string(1000, 'x'));
  }
  const std::string outside = f.dir + "/results/notes.pt";
  write_file(outside, "not a checkpoint directory");

  auto dry = run_amptune({"gc", "--dry-run", "--db", f.db}, f.dir);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  for (auto& p : planted) {
    EXPECT_NE(dry.out.find(p), std::string::npos) << dry.out;
    EXPECT_TRUE(fs::exists(p)) << p;
  }
  EXPECT_NE(dry.out.find("would free 3000 bytes"), std::string::npos) << dry.out;
  for (auto& [path, sha] : referenced) EXPECT_EQ(dry.out.find(path + " "), std::string::npos);

  auto real = run_amptune({"gc", "--db", f.db}, f.dir);
  ASSERT_EQ(real.exit_code, 0) << real.err;
  EXPECT_NE(real.out.find("freed 3000 bytes"), std::string::npos) << real.out;
  for (auto& p : planted) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_FALSE(fs::exists(f.dir + "/results/checkpoints/amptune/4242"));
  EXPECT_TRUE(fs::exists(outside));
  for (auto& [path, sha] : referenced) EXPECT_EQ(sha_of(path), sha) << path;
  EXPECT_EQ(std::distance(fs::directory_iterator(ckpt), fs::directory_iterator{}), 2);

  auto again = run_amptune({"gc", "--db", f.db}, f.dir);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("freed 0 bytes"), std::string::npos) << again.out;
  // The run still resumes/evaluates from its kept checkpoints.
  auto ev = run_amptune({"eval", run, "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(ev.exit_code, 0) << ev.err;
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

TEST(CheckpointsCli, EvalOfRootNetUsesItsTestSetAndCastPoints) {
  const std::string dir = scratch_dir();
  for (const auto& [format, sub, images] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"muco", "MuCo", "16"}, {"mupots", "MuPoTS", "8"}}) {
    auto r = run_amptune({"data", "synth-rootnet", "--format", format, "--out", dir + "/" + sub,
                          "--images", images, "--seed", "5", "--width", "128", "--height", "96"},
                         dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string yaml = dir + "/rootnet.yaml", db = dir + "/results/amptune.sqlite";
  write_file(yaml, "name: rn_eval\n"
                   "base:\n"
                   "  model: {name: rootnet, backbone_depth: 18, width: 0.0625}\n"
                   "  data: {format: rootnet, batch_size: 8, workers: 1}\n"
                   "  rootnet: {train_sets: [muco], test_set: mupots, input_size: 64,\n"
                   "            muco_root: " + dir + "/MuCo, mupots_root: " + dir + "/MuPoTS}\n"
                   "  casts: {int32: [k_value, cam_param]}\n"
                   "  optim: {name: adam, lr: 0.001, weight_decay: 0}\n"
                   "  schedule: {epochs: 2, skip_steps: 1, training_step_per_epoch: 2}\n"
                   "  threads: 1\n");
  fs::create_directories(dir + "/results");
  auto r = run_amptune({"run", yaml, "--db", db, "-q"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trained = epochs_of(db, "1");
  ASSERT_EQ(trained.size(), 2u);
  r = run_amptune({"eval", "1", "--all", "--db", db, "-q"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ap_root_25"), std::string::npos) << r.out;
  const auto evaluated = epochs_of(db, "1");
  for (size_t e = 0; e < 2; ++e) {
    for (const char* m : {"mrpe", "mrpe_z", "ap_root_25"}) {
      ASSERT_TRUE(trained[e].metrics.count(m)) << m;
      EXPECT_EQ(evaluated[e].metrics.at(m), trained[e].metrics.at(m)) << "epoch " << e << " " << m;
    }
    EXPECT_EQ(evaluated[e].metrics, trained[e].metrics);
  }
}

bool python_torchvision() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
  return ok;
}

TEST(CheckpointsCli, ExportLoadsStrictlyIntoTorchvisionResnet18) {
  if (!python_torchvision()) GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision missing";
  // Full-width resnet18 (torchvision's layout) with a 1-channel stem and 4 classes; 2 steps.
  auto f = make(1, ", training_step_per_epoch: 2, eval_step_per_epoch: 0", "",
                "{name: resnet18, num_classes: 4, in_channels: 1, width: 1.0, small_input: false}");
  train(f);
  const std::string run = std::to_string(only_run(f));
  const std::string out = f.dir + "/export/resnet18.pt";
  fs::create_directories(f.dir + "/export");
  auto r = run_amptune({"export", run, "--epoch", "0", "--out", out, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + out), std::string::npos) << r.out;
  EXPECT_EQ(std::distance(fs::directory_iterator(f.dir + "/export"), fs::directory_iterator{}), 1);

  const std::string script = f.dir + "/check.py", report = f.dir + "/report.txt";
  write_file(script,
             "import sys, torch, torchvision\n"
             "sd = torch.load(sys.argv[1])\n"
             "assert type(sd) is dict, type(sd)\n"
             "m = torchvision.models.resnet18(num_classes=4)\n"
             "m.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)\n"
             "m.load_state_dict(sd, strict=True)\n"
             "ref = m.state_dict()\n"
             "same = all(torch.equal(ref[k], sd[k]) for k in ref)\n"
             "with open(sys.argv[2], 'w') as f:\n"
             "    f.write('%d %s %s %d %s\\n' % (len(sd), sd['layer4.1.conv2.weight'].dtype,\n"
             "            sd['bn1.num_batches_tracked'].dtype,\n"
             "            sd['bn1.num_batches_tracked'].item(), same))\n");
  const std::string cmd = "/usr/bin/python3 " + script + " " + out + " " + report;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // 62 parameters + 60 BatchNorm buffers (20 layers x mean/var/num_batches_tracked), as
  // torchvision's resnet18 state dict.
  EXPECT_EQ(read_file(report), "122 torch.float32 torch.int64 2 True\n");

  // Epoch without a checkpoint: error with the saved epochs, nothing written.
  r = run_amptune({"export", run, "--epoch", "3", "--out", f.dir + "/x.pt", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_NE(r.err.find("saved epochs: 0"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(f.dir + "/x.pt"));
}

}  // namespace
}  // namespace amptune::testing
