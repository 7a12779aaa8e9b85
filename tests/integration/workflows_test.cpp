// End-to-end tests of the resume-and-compare workflows with the real binary: forks (CLI and
// sweep `forks:`), parallel workers on one sweep, and failure modes (deleted checkpoint, a file
// that is not SQLite, a read-only results directory, a full disk simulated with a file-size limit).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "integration/harness.h"
#include "store/store.h"
#include "support/processes.h"  // children_of

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

using Fixture = TinySweep;

// A tiny 3-epoch sweep (seconds per run); `grid` and `extra` are appended to the YAML.
Fixture make(const std::string& grid, const std::string& extra = "", int epochs = 3,
             int train_n = 64) {
  TinyOptions o;
  o.name = "flow";
  o.epochs = epochs;
  o.train_n = train_n;
  o.test_n = 32;
  o.loader_workers = 1;
  o.base = extra;
  o.tail = grid;
  return make_tiny_sweep(o);
}

// Rows of a query, each column as text ("" for NULL). `polling`: the database may be half
// created by a running process; errors give no rows instead of a test failure.
std::vector<std::vector<std::string>> query(const std::string& db, const std::string& sql,
                                            bool polling = false) {
  sqlite3* h = nullptr;
  const int opened = sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  if (!polling) {
    EXPECT_EQ(opened, SQLITE_OK);
  }
  sqlite3_busy_timeout(h, 10000);
  sqlite3_stmt* st = nullptr;
  const int prepared = sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr);
  if (!polling) {
    EXPECT_EQ(prepared, SQLITE_OK) << sqlite3_errmsg(h);
  }
  std::vector<std::vector<std::string>> rows;
  while (st && sqlite3_step(st) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      auto* t = sqlite3_column_text(st, c);
      row.push_back(t ? reinterpret_cast<const char*>(t) : "");
    }
    rows.push_back(row);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return rows;
}

std::string only_run(const std::string& db, const std::string& where = "parent_run_id IS NULL") {
  auto rows = query(db, "SELECT name FROM runs WHERE " + where + " ORDER BY id");
  EXPECT_EQ(rows.size(), 1u) << where;
  return rows.empty() ? "" : rows[0][0];
}

TEST(Fork, WithoutChangesContinuesExactlyLikeItsParent) {
  auto f = make("");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir).exit_code, 0);
  const std::string parent = only_run(f.db);
  auto r = run_amptune({"fork", parent, "--epoch", "0", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string fork = only_run(f.db, "parent_run_id IS NOT NULL");
  auto p = epochs_of(f.db, parent), k = epochs_of(f.db, fork);
  ASSERT_EQ(p.size(), 3u);
  ASSERT_EQ(k.size(), 2u);  // epochs 1 and 2: the fork's own
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_EQ(k[i].epoch, p[i + 1].epoch);
    EXPECT_EQ(k[i].global_step, p[i + 1].global_step);
    // weights, momentum and RNG carried over bit for bit: the same losses and accuracy
    EXPECT_EQ(k[i].train_loss, p[i + 1].train_loss) << "epoch " << k[i].epoch;
    EXPECT_EQ(k[i].metrics.at("acc1"), p[i + 1].metrics.at("acc1"));
    EXPECT_EQ(k[i].metrics.at("val_loss"), p[i + 1].metrics.at("val_loss"));
  }
  // asking for the same fork again is the same (finished) run
  r = run_amptune({"fork", parent, "--epoch", "0", "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("already done"), std::string::npos) << r.out;
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM runs")[0][0], "2");
}

// An O2 parent steps fp32 masters: its fork starts from them (not from copies of the weights
// rounded onto the fp16 grid), so it too continues bit for bit.
TEST(Fork, AnO2ForkContinuesFromTheParentsMasters) {
  auto f = make("", "  amp: {opt_level: O2, backend: emulate}\n");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir).exit_code, 0);
  const std::string parent = only_run(f.db);
  auto r = run_amptune({"fork", parent, "--epoch", "0", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto p = epochs_of(f.db, parent), k = epochs_of(f.db, only_run(f.db, "parent_run_id IS NOT NULL"));
  ASSERT_EQ(k.size(), 2u);
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_EQ(k[i].train_loss, p[i + 1].train_loss) << "epoch " << k[i].epoch;
    EXPECT_EQ(k[i].metrics.at("val_loss"), p[i + 1].metrics.at("val_loss"));
    EXPECT_EQ(k[i].metrics.at("loss_scale"), p[i + 1].metrics.at("loss_scale"));
  }
}

// optim.fused in real training: a fork switching to the fused (multi-tensor) optimizer continues
// from the unfused parent's momentum and gives the parent's losses within float rounding.
TEST(Fork, FusedOptimizerContinuesTheUnfusedParent) {
  auto f = make("");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir).exit_code, 0);
  const std::string parent = only_run(f.db);
  auto r = run_amptune({"fork", parent, "--epoch", "0", "--set", "optim.fused=true", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto p = epochs_of(f.db, parent), k = epochs_of(f.db, only_run(f.db, "parent_run_id IS NOT NULL"));
  ASSERT_EQ(k.size(), 2u);
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_NEAR(k[i].train_loss, p[i + 1].train_loss, 1e-5 * (1 + std::abs(p[i + 1].train_loss)));
    EXPECT_NEAR(k[i].metrics.at("val_loss"), p[i + 1].metrics.at("val_loss"), 1e-4);
  }
}

TEST(Fork, ChangedLossScaleLeavesTheParentAloneAndDrawsOneLineage) {
  auto f = make("", "  amp: {opt_level: O1, backend: emulate, loss_scale: 128}\n");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir).exit_code, 0);
  const std::string parent = only_run(f.db);
  const auto before = epochs_of(f.db, parent);
  auto r = run_amptune({"fork", parent, "--epoch", "1", "--set", "amp.loss_scale=dynamic",
                        "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string fork = only_run(f.db, "parent_run_id IS NOT NULL");

  // parent untouched: same rows, same recorded_at, same checkpoint files and hashes
  const auto after = epochs_of(f.db, parent);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].recorded_at, before[i].recorded_at);
    ASSERT_TRUE(after[i].checkpoint && before[i].checkpoint);
    EXPECT_EQ(after[i].checkpoint->sha256, before[i].checkpoint->sha256);
    EXPECT_TRUE(fs::exists(after[i].checkpoint->path));
  }
  // the fork's row says where it came from and what changed
  auto row = query(f.db, "SELECT p.name, f.parent_epoch, f.fork_changes, f.fork_overrides, "
                         "f.loss_scale, f.status, f.reset_optimizer FROM runs f "
                         "JOIN runs p ON p.id = f.parent_run_id");
  ASSERT_EQ(row.size(), 1u);
  EXPECT_EQ(row[0][0], parent);
  EXPECT_EQ(row[0][1], "1");
  EXPECT_EQ(row[0][2], "amp.loss_scale: 128.0 -> \"dynamic\"");
  EXPECT_EQ(nlohmann::json::parse(row[0][3]), nlohmann::json({{"amp.loss_scale", "dynamic"}}));
  EXPECT_EQ(row[0][4], "dynamic");
  EXPECT_EQ(row[0][5], "done");
  EXPECT_EQ(row[0][6], "0");
  // the fork scales dynamically from a fresh scaler: its initial scale is recorded
  auto events = query(f.db, "SELECT epoch, global_step, scale, reason FROM loss_scale_events e "
                            "JOIN runs r ON r.id = e.run_id WHERE r.name = '" + fork +
                            "' ORDER BY global_step LIMIT 1");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0][0], "2");
  EXPECT_EQ(events[0][1], std::to_string(before[1].global_step));
  EXPECT_EQ(events[0][2], "65536.0");
  EXPECT_EQ(events[0][3], "init");

  // lineage: the parent's epochs 0-1 then the fork's epoch 2, one line
  auto line = query(f.db, "SELECT epoch, source_run, metric, value FROM lineage WHERE run = '" +
                              fork + "' ORDER BY epoch");
  ASSERT_EQ(line.size(), 3u);
  EXPECT_EQ(line[0][1], parent);
  EXPECT_EQ(line[1][1], parent);
  EXPECT_EQ(line[2][1], fork);
  EXPECT_EQ(line[0][2], "acc1");
  EXPECT_EQ(line[1][3], query(f.db, "SELECT value FROM metrics m JOIN runs r ON r.id = m.run_id "
                                    "WHERE r.name = '" + parent + "' AND epoch = 1 AND m.name = 'acc1'")[0][0]);
  // the parent's own lineage is just its epochs
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM lineage WHERE run = '" + parent + "'")[0][0], "3");
  auto vs = query(f.db, "SELECT parent, parent_epoch, parent_at_fork IS NOT NULL, fork_last IS NOT NULL "
                        "FROM fork_vs_parent");
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(vs[0][0], parent);
  EXPECT_EQ(vs[0][1], "1");
  EXPECT_EQ(vs[0][2], "1");
  EXPECT_EQ(vs[0][3], "1");
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

TEST(Fork, RefusesWhatAContinuedRunCannotTake) {
  auto f = make("", "", 2);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir).exit_code, 0);
  const std::string parent = only_run(f.db);
  auto r = run_amptune({"fork", parent, "--epoch", "0", "--set", "model.width=0.125", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("model.width cannot change"), std::string::npos) << r.err;
  r = run_amptune({"fork", parent, "--epoch", "7", "--db", f.db}, f.dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no checkpoint of epoch 7 (saved epochs: 0, 1)"), std::string::npos) << r.err;
  r = run_amptune({"fork", parent, "--epoch", "1", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("nothing is left to train"), std::string::npos) << r.err;
  r = run_amptune({"fork", parent, "--epoch", "0", "--set", "optim.name=adam", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("--reset-optimizer"), std::string::npos) << r.err;
  r = run_amptune({"fork", parent, "--epoch", "0", "--set", "optim.lr=abc", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("optim.lr"), std::string::npos) << r.err;
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM runs")[0][0], "1");  // nothing created
  // a new optimizer with --reset-optimizer is fine
  r = run_amptune({"fork", parent, "--epoch", "0", "--set", "optim.name=adam", "--set",
                   "optim.lr=0.001", "--reset-optimizer", "--name", "adam-from-0", "--db", f.db, "-q"},
                  f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto row = query(f.db, "SELECT label, optimizer, reset_optimizer, status FROM runs WHERE parent_run_id IS NOT NULL");
  ASSERT_EQ(row.size(), 1u);
  EXPECT_EQ(row[0], (std::vector<std::string>{"adam-from-0", "adam", "1", "done"}));
}

TEST(SweepForks, AreTrainedAfterTheirParentsAndOnlyOnce) {
  auto f = make("grid:\n  optim.lr: [0.05, 0.1]\n",
                "", 3);
  write_file(f.yaml, read_file(f.yaml) +
                         "forks:\n"
                         "  - from: {where: {optim.lr: 0.1}, epoch: 0}\n"
                         "    grid: {optim.lr: [0.01, 0.02]}\n"
                         "    name: lower-lr\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--dry-run"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plus 2 forks"), std::string::npos) << r.out;
  r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = query(f.db, "SELECT f.label, p.lr, f.lr, f.parent_epoch, f.status, "
                          "(SELECT count(*) FROM epochs e WHERE e.run_id = f.id) FROM runs f "
                          "JOIN runs p ON p.id = f.parent_run_id ORDER BY f.lr");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"lower-lr optim.lr=0.01", "0.1", "0.01", "0", "done", "2"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"lower-lr optim.lr=0.02", "0.1", "0.02", "0", "done", "2"}));
  // the fork's swept values include its override, so compare/group by optim.lr sees it
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM run_params WHERE key = 'optim.lr' AND value_json = '0.01'")[0][0], "1");
  // a second run trains nothing
  const auto recorded = query(f.db, "SELECT run_id, epoch, recorded_at FROM epochs ORDER BY 1, 2");
  r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(query(f.db, "SELECT run_id, epoch, recorded_at FROM epochs ORDER BY 1, 2"), recorded);
}

TEST(SweepForks, BadEntriesNameTheLine) {
  auto f = make("", "", 2);
  const std::string base = read_file(f.yaml);
  write_file(f.yaml, base + "forks:\n  - from: {where: {optim.lr: 0.3}, epoch: 0}\n    set: {optim.lr: 0.01}\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("sweep.yaml:10:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("matches no cell"), std::string::npos) << r.err;
  write_file(f.yaml, base + "forks:\n  - from: {epoch: 0}\n    set: {model.width: 0.5}\n");
  r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("sweep.yaml:11:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.width cannot change in a fork"), std::string::npos) << r.err;
  write_file(f.yaml, base + "forks:\n  - from: {epoch: 1}\n    set: {optim.lr: 0.01}\n");
  r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("nothing is left to train"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(f.db));  // validation before the database is touched
}

TEST(Workers, ThreeWorkersTrainSixCellsEachExactlyOnce) {
  auto f = make("grid:\n  optim.lr: [0.02, 0.05, 0.1]\n  optim.momentum: [0.0, 0.9]\n", "", 2);
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--workers", "3"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("locked"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("started 3 worker processes"), std::string::npos);
  auto runs = query(f.db, "SELECT name, status FROM runs ORDER BY id");
  ASSERT_EQ(runs.size(), 6u);
  for (const auto& run : runs) {
    EXPECT_EQ(run[1], "done") << run[0];
    // each run trained its epoch 0 exactly once across all workers' output
    const std::regex line("run " + run[0] + " epoch 0: train_loss");
    auto n = std::distance(std::sregex_iterator(r.err.begin(), r.err.end(), line), std::sregex_iterator());
    EXPECT_EQ(n, 1) << run[0];
  }
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM epochs")[0][0], "12");
  // three workers each went through the sweep
  const std::regex summary("sweep flow: [0-9]+ trained");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.err.begin(), r.err.end(), summary), std::sregex_iterator()), 3)
      << r.err;
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

TEST(Workers, ASweepThatGainedValuesTrainsOnlyTheNewCells) {
  auto f = make("grid:\n  optim.lr: [0.05]\n", "", 2);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir).exit_code, 0);
  const auto first = query(f.db, "SELECT run_id, epoch, recorded_at FROM epochs ORDER BY 1, 2");
  ASSERT_EQ(first.size(), 2u);
  std::string yaml = read_file(f.yaml);
  yaml.replace(yaml.find("[0.05]"), 6, "[0.05, 0.1]");
  write_file(f.yaml, yaml);
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--workers", "2"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto after = query(f.db, "SELECT run_id, epoch, recorded_at FROM epochs ORDER BY 1, 2");
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(std::vector<std::vector<std::string>>(after.begin(), after.begin() + 2), first);
  EXPECT_EQ(query(f.db, "SELECT label, status FROM runs ORDER BY id"),
            (std::vector<std::vector<std::string>>{{"optim.lr=0.05", "done"}, {"optim.lr=0.1", "done"}}));
}

TEST(Workers, AKilledWorkersRunIsTakenOverAndEndsAsIfUninterrupted) {
  auto f = make("grid:\n  optim.lr: [0.05, 0.1]\n", "", 3, 1200);
  const pid_t pid = spawn_amptune({"run", f.yaml, "--db", f.db, "--workers", "2", "--stale-after", "3"},
                                  f.dir);
  StopOnExit stop(pid);
  // Kill one worker while both runs are past epoch 0 and neither has finished.
  bool killed = false;
  for (int i = 0; i < 1200 && !killed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!fs::exists(f.db)) continue;
    auto n = query(f.db, "SELECT count(DISTINCT run_id), max(epoch) FROM epochs", true);
    if (n.empty() || n[0][0] != "2" || n[0][1] == "2") continue;
    auto workers = children_of(pid);
    ASSERT_EQ(workers.size(), 2u);
    ASSERT_EQ(::kill(workers[0], SIGKILL), 0);
    killed = true;
  }
  ASSERT_TRUE(killed) << read_file(f.dir + "/child.err");
  const int code = wait_exit_code(pid);
  const std::string err = read_file(f.dir + "/child.err");
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(err.find("killed by signal 9"), std::string::npos) << err;
  EXPECT_NE(err.find("continuing after epoch"), std::string::npos) << err;  // taken over
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM runs WHERE status = 'done'")[0][0], "2");
  // the same sweep straight in one process: identical losses and metrics every epoch
  const std::string straight = f.dir + "/results/straight.sqlite";
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", straight, "-q"}, f.dir).exit_code, 0);
  auto a = query(f.db, "SELECT r.label, e.epoch, e.train_loss, m.value FROM epochs e JOIN runs r ON r.id = e.run_id "
                       "JOIN metrics m ON m.run_id = e.run_id AND m.epoch = e.epoch AND m.name = 'acc1' ORDER BY 1, 2");
  auto b = query(straight, "SELECT r.label, e.epoch, e.train_loss, m.value FROM epochs e JOIN runs r ON r.id = e.run_id "
                           "JOIN metrics m ON m.run_id = e.run_id AND m.epoch = e.epoch AND m.name = 'acc1' ORDER BY 1, 2");
  EXPECT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

// --- claims: who trains a run -------------------------------------------------------------------

// Adds a table counting every INSERT into epochs (a re-recorded epoch counts twice).
void count_epoch_writes(const std::string& db) {
  { store::Store create(db); }  // the schema
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h,
                         "CREATE TABLE epoch_writes (run_id INTEGER, epoch INTEGER);"
                         "CREATE TRIGGER epoch_written AFTER INSERT ON epochs BEGIN "
                         "INSERT INTO epoch_writes VALUES (NEW.run_id, NEW.epoch); END;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(h);
  sqlite3_close(h);
}

// Polls until `sql` (one value) reads at least `at_least`; false after ~60 s.
bool wait_for_count(const std::string& db, const std::string& sql, int at_least) {
  for (int i = 0; i < 1200; ++i) {
    auto rows = query(db, sql, true);
    if (!rows.empty() && !rows[0][0].empty() && std::stoi(rows[0][0]) >= at_least) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(Claims, ALiveRunOfAnotherHostIsNotTakenOverWhileItsHeartbeatIsFresh) {
  // Epochs much shorter than --stale-after: only a heartbeat that advances while the run
  // trains keeps the second process (another host as far as pids go) from taking it over.
  // 30 epochs of 40 steps: about 0.4 s each, 12 s in all against --stale-after 5 (the holder
  // beats every 2 s and with every epoch).
  auto f = make("", "", 30, 640);
  count_epoch_writes(f.db);
  const std::vector<std::string> cmd = {"run", f.yaml, "--db", f.db, "--no-progress",
                                        "--stale-after", "5"};
  const pid_t a = spawn_amptune(cmd, f.dir, {{{"AMPTUNE_HOST_ID", "host-a"}}, "a"});
  StopOnExit stop_a(a);
  ASSERT_TRUE(wait_for_count(f.db, "SELECT count(*) FROM epoch_writes", 1)) << read_file(f.dir + "/a.err");
  const pid_t b = spawn_amptune(cmd, f.dir, {{{"AMPTUNE_HOST_ID", "host-b"}}, "b"});
  StopOnExit stop_b(b);
  const int code_a = wait_exit_code(a), code_b = wait_exit_code(b);
  const std::string err_a = read_file(f.dir + "/a.err"), err_b = read_file(f.dir + "/b.err");
  EXPECT_EQ(code_a, 0) << err_a;
  EXPECT_EQ(code_b, 0) << err_b;
  EXPECT_NE(err_b.find("is being trained by process " + std::to_string(a)), std::string::npos) << err_b;
  EXPECT_EQ(err_b.find("continuing after epoch"), std::string::npos) << err_b;
  EXPECT_EQ(query(f.db, "SELECT count(*), count(DISTINCT epoch) FROM epoch_writes"),
            (std::vector<std::vector<std::string>>{{"30", "30"}}))
      << err_a << err_b;
  EXPECT_EQ(query(f.db, "SELECT status FROM runs")[0][0], "done");
}

TEST(Claims, AProcessWhoseRunWasTakenOverStopsWithoutWriting) {
  auto f = make("", "", 40);
  count_epoch_writes(f.db);
  const pid_t a = spawn_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  StopOnExit stop(a);
  ASSERT_TRUE(wait_for_count(f.db, "SELECT count(*) FROM epoch_writes", 2)) << read_file(f.dir + "/child.err");
  // Another host's process takes the run over (as claim_run does when a's heartbeat is stale),
  // and counts the epochs written until then in the same transaction.
  int written = 0;
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(f.db.c_str(), &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 10000);
    ASSERT_EQ(sqlite3_exec(h, "BEGIN IMMEDIATE; UPDATE runs SET claim_machine = 'host-z', "
                              "claim_pid = 4242, claim_pid_start = 1, host = 'z'",
                           nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(h);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(h, "SELECT count(*) FROM epoch_writes", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    written = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    ASSERT_EQ(sqlite3_exec(h, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(h);
  }
  ASSERT_LT(written, 40) << "the run finished before it could be taken over";
  EXPECT_EQ(wait_exit_code(a), 0);
  const std::string err = read_file(f.dir + "/child.err");
  EXPECT_NE(err.find("taken over by process 4242 on z"), std::string::npos) << err;
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM epoch_writes")[0][0], std::to_string(written));
  // The run is the other process's: still running, its holder untouched.
  EXPECT_EQ(query(f.db, "SELECT status, claim_pid FROM runs"),
            (std::vector<std::vector<std::string>>{{"running", "4242"}}));
}

TEST(Claims, RerunAfterAKillOnTheSameHostTakesOverAtOnce) {
  auto f = make("", "", 30);
  const pid_t a = spawn_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  StopOnExit stop(a);
  ASSERT_TRUE(wait_for_count(f.db, "SELECT count(*) FROM epochs", 1)) << read_file(f.dir + "/child.err");
  ASSERT_EQ(::kill(a, SIGKILL), 0);
  ASSERT_EQ(wait_exit_code(a), 128 + SIGKILL);
  ASSERT_EQ(query(f.db, "SELECT status FROM runs")[0][0], "running");
  // The default --stale-after (60 s) does not apply: the holder was a process of this host and
  // it is gone.
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("waiting"), std::string::npos) << r.err;  // no heartbeat rule
  EXPECT_NE(r.err.find("continuing after epoch"), std::string::npos) << r.err;
  EXPECT_EQ(query(f.db, "SELECT status FROM runs")[0][0], "done");
}

TEST(Claims, EveryRunOptionPassesOnToWorkers) {
  auto f = make("grid:\n  optim.lr: [0.05, 0.1]\n  seed: [1, 2]\n", "", 3);
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--workers", "2", "--no-progress",
                        "--threads", "1", "--retry-failed", "--stale-after", "30",
                        "--stop-after-epoch", "0", "--set", "optim.momentum=0.8", "--only",
                        "seed=1"},
                       f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(query(f.db, "SELECT count(*), sum(status = 'pending') FROM runs"),
            (std::vector<std::vector<std::string>>{{"2", "2"}}));
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM epochs")[0][0], "2");
  EXPECT_EQ(query(f.db, "SELECT DISTINCT json_extract(config_json, '$.optim.momentum') FROM runs")[0][0],
            "0.8");
  r = run_amptune({"run", f.yaml, "--db", f.db, "--workers=2", "-q", "--only", "seed=1"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM runs WHERE status = 'done'")[0][0], "2");
}

TEST(Claims, TempFilesOfDeadWritersAreRemovedWhenTheRunStartsAgain) {
  auto f = make("", "", 2);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "0"}, f.dir).exit_code, 0);
  const std::string run = only_run(f.db);
  const fs::path dir = fs::path(epochs_of(f.db, run).at(0).checkpoint->path).parent_path();
  // A real process that died in the middle of a save leaves its temp file behind.
  const pid_t writer = ::fork();
  if (writer == 0) {
    std::ofstream(dir / ("epoch_0001.safetensors.tmp." + std::to_string(::getpid()))) << "half a checkpoint";
    ::_exit(0);
  }
  ASSERT_EQ(wait_exit_code(writer), 0);
  const fs::path dead = dir / ("epoch_0001.safetensors.tmp." + std::to_string(writer));
  const fs::path live = dir / ("epoch_0001.safetensors.tmp." + std::to_string(::getpid()));  // this test lives
  ASSERT_TRUE(fs::exists(dead));
  std::ofstream(live) << "another process's save in flight";
  auto r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_NE(r.err.find("removed " + dead.string()), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(live));
}

TEST(Failures, DeletedCheckpointFallsBackOrIsNamed) {
  auto f = make("", "", 3);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "1"}, f.dir).exit_code, 0);
  const std::string run = only_run(f.db);
  auto rows = epochs_of(f.db, run);
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_TRUE(rows[1].checkpoint);
  fs::remove(rows[1].checkpoint->path);
  auto r = run_amptune({"resume", run, "--from-epoch", "1", "--db", f.db, "-q"}, f.dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(rows[1].checkpoint->path + " is missing"), std::string::npos) << r.err;
  r = run_amptune({"resume", run, "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("falling back"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("continuing after epoch 0"), std::string::npos) << r.err;
  EXPECT_EQ(epochs_of(f.db, run).size(), 3u);
  store::Store s(f.db);
  EXPECT_EQ(s.integrity_check(), "ok");
}

TEST(Failures, TwoDatabasesInOneDirectoryKeepTheirOwnCheckpoints) {
  auto f = make("", "", 2);
  const std::string a = f.dir + "/results/a.sqlite", b = f.dir + "/results/b.sqlite";
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", a, "-q"}, f.dir).exit_code, 0);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", b, "-q", "--set", "optim.lr=0.1"}, f.dir).exit_code, 0);
  auto ea = epochs_of(a, "1"), eb = epochs_of(b, "1");  // both databases' run 1
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 2u);
  EXPECT_EQ(ea[1].checkpoint->path, f.dir + "/results/checkpoints/a/1/epoch_0001.safetensors");
  EXPECT_EQ(eb[1].checkpoint->path, f.dir + "/results/checkpoints/b/1/epoch_0001.safetensors");
  // a's files are still a's: resuming from them verifies their recorded sha256
  auto r = run_amptune({"resume", "1", "--from-epoch", "0", "--db", a, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("falling back"), std::string::npos) << r.err;
  auto gc = run_amptune({"gc", "--db", a}, f.dir);
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_TRUE(fs::exists(eb[1].checkpoint->path));
}

TEST(Failures, FileThatIsNotSqliteIsRefusedAndLeftAlone) {
  auto f = make("", "", 2);
  write_file(f.db, "these are my notes, not a database\n");
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find(f.db), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is not an amptune SQLite database"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(f.db), "these are my notes, not a database\n");
  EXPECT_FALSE(fs::exists(f.dir + "/results/checkpoints"));
}

// chattr +i makes a directory read-only even for root (tests may run as root, for whom chmod
// changes nothing).
bool make_read_only(const std::string& dir, bool on) {
  if (::geteuid() != 0) {
    fs::permissions(dir, on ? fs::perms::owner_read | fs::perms::owner_exec : fs::perms::owner_all);
    return true;
  }
  const std::string cmd = std::string("chattr ") + (on ? "+i" : "-i") + " '" + dir + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

TEST(Failures, ReadOnlyResultsDirectoryIsAClearErrorAndLosesNothing) {
  auto f = make("", "", 2);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "0"}, f.dir).exit_code, 0);
  const std::string run = only_run(f.db);
  const auto before = epochs_of(f.db, run);
  const std::string results = f.dir + "/results";
  if (!make_read_only(results, true)) GTEST_SKIP() << "cannot make a directory read-only here";
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  auto fresh = run_amptune({"run", f.yaml, "--db", results + "/other.sqlite", "-q"}, f.dir);
  make_read_only(results, false);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find(f.db), std::string::npos) << r.err;
  EXPECT_EQ(fresh.exit_code, 5) << fresh.err;
  EXPECT_NE(fresh.err.find("other.sqlite"), std::string::npos) << fresh.err;
  EXPECT_FALSE(fs::exists(results + "/other.sqlite"));
  // nothing lost: the run continues once the directory is writable again
  const auto after = epochs_of(f.db, run);
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(after[0].recorded_at, before[0].recorded_at);
  r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(epochs_of(f.db, run).size(), 2u);
}

TEST(Failures, FullDiskFailsTheRunCleanly) {
  auto f = make("", "", 2);
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "0"}, f.dir).exit_code, 0);
  const std::string run = only_run(f.db);
  const auto before = epochs_of(f.db, run);
  ASSERT_EQ(before.size(), 1u);
  ASSERT_TRUE(before[0].checkpoint);
  // A file-size limit just below the checkpoint's size (about 370 KB for this model) and above
  // the database's: the disk "fills" while epoch 1's checkpoint is written.
  const int64_t limit_kib = before[0].checkpoint->bytes / 1024 - 8;
  ASSERT_GT(limit_kib, 300);
  const std::string bin = AMPTUNE_BINARY;
  const std::string cmd = "cd '" + f.dir + "' && ulimit -f " + std::to_string(limit_kib) +
                          " && exec '" + bin + "' run '" +
                          f.yaml + "' --db '" + f.db + "' -q > full.out 2> full.err";
  const int status = std::system(("bash -c \"" + cmd + "\"").c_str());
  const std::string err = read_file(f.dir + "/full.err");
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 8) << err;  // failed runs
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_NE(err.find("epoch_0001.safetensors"), std::string::npos) << err;
  // nothing half-written: no epoch-1 file or temp file, no epoch-1 row, the run marked failed,
  // epoch 0 and its checkpoint intact
  const fs::path ckpt_dir = fs::path(before[0].checkpoint->path).parent_path();
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(ckpt_dir)) files.push_back(e.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"epoch_0000.safetensors"});
  auto runs = query(f.db, "SELECT status, message FROM runs");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0][0], "failed");
  EXPECT_NE(runs[0][1].find("File too large"), std::string::npos) << runs[0][1];
  const auto after = epochs_of(f.db, run);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].checkpoint->sha256, before[0].checkpoint->sha256);
  {
    store::Store s(f.db);
    EXPECT_EQ(s.integrity_check(), "ok");
  }
  // with space again, --retry-failed continues from epoch 0
  auto r = run_amptune({"run", f.yaml, "--db", f.db, "--retry-failed"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("continuing after epoch 0"), std::string::npos) << r.err;
  EXPECT_EQ(query(f.db, "SELECT status FROM runs")[0][0], "done");
}

}  // namespace
}  // namespace amptune::testing
