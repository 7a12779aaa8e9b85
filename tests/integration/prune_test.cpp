// Pruning with the real binary (docs/PRUNING.md): a sweep's prune: block stops losing cells early
// (status pruned, the decision and its evidence in prune_decisions), workers share the decisions
// through the database, --no-prune continues a pruned cell bitwise, and bad blocks are refused
// before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

// Nine cells 2x apart in learning rate (0.0002 ... 0.05, 250x between the ends) of the tiny
// data set, 9 short epochs each: the good and the bad cells differ clearly.
constexpr int kEpochs = 9;
const std::string kGrid =
    "grid:\n  optim.lr: [0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1]\n";

TinySweep make_grid(const std::string& prune, const std::string& tag) {
  TinyOptions o = quick_tiny(kGrid + prune, kEpochs);
  o.name = "halving";
  o.dir_tag = tag;
  return make_tiny_sweep(o);
}

// val_loss (lower is better): the tiny set is learnt to 100 % acc1 by several cells, their losses
// still differ.
const std::string kAsha = "prune: {rule: asha, metric: val_loss, grace_epochs: 1, eta: 3}\n";

struct Cell {
  std::string name, status;
  int epochs = 0;
  double last_acc1 = NAN, last_val_loss = NAN;
};

// Every run of the database by cell index.
std::map<int, Cell> cells_of(const std::string& db) {
  store::Store store(db);
  std::map<int, Cell> out;
  for (const records::RunRow& run : store.runs()) {
    Cell c;
    c.name = run.name;
    c.status = records::to_string(run.status);
    const auto rows = store.epochs(run.id);
    c.epochs = static_cast<int>(rows.size());
    if (!rows.empty()) {
      c.last_acc1 = rows.back().metrics.at("acc1");
      c.last_val_loss = rows.back().metrics.at("val_loss");
    }
    out[run.cell_index] = c;
  }
  return out;
}

int total_epochs(const std::map<int, Cell>& cells) {
  int n = 0;
  for (const auto& [index, c] : cells) n += c.epochs;
  return n;
}

// The cell with the lowest final val_loss among those trained to the last epoch.
int best_done(const std::map<int, Cell>& cells) {
  int best = -1;
  for (const auto& [index, c] : cells) {
    if (c.epochs != kEpochs) continue;
    if (best < 0 || c.last_val_loss < cells.at(best).last_val_loss) best = index;
  }
  return best;
}

std::string describe(const std::map<int, Cell>& cells) {
  std::string out;
  for (const auto& [index, c] : cells) {
    out += "\n  cell " + std::to_string(index) + " " + c.status + " epochs " +
           std::to_string(c.epochs) + " acc1 " + std::to_string(c.last_acc1) + " val_loss " +
           std::to_string(c.last_val_loss);
  }
  return out;
}

// The full grid, trained once for the tests that compare with it.
const TinySweep& full_grid() {
  static const TinySweep f = [] {
    TinySweep g = make_grid("", "full");
    const Result r = run_amptune({"run", g.yaml, "--db", g.db, "--no-progress"}, g.dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return g;
  }();
  return f;
}

// Every decision is consistent with the rule applied to the final database: the values it
// compared are those stored (they never change once recorded); at each rung the cells that went
// past it are exactly the final top 1/eta there (at least the best; ties go on too: amptune's
// asha lets a cell go on only when it is sure to stay there, and promotes the waiting ones
// that turn out to be); no run has an epoch after a stop not followed by a decision to continue;
// and no epoch was trained twice (each "epoch N:" line once in the log of every process).
void expect_decisions_consistent(const std::string& db, const std::string& log) {
  store::Store store(db);
  std::map<int64_t, std::map<int, double>> loss;  // val_loss, the compared metric
  for (const records::RunRow& run : store.runs()) {
    for (const auto& row : store.epochs(run.id)) {
      loss[run.id][row.epoch] = row.metrics.at("val_loss");
    }
  }
  for (const records::RunRow& run : store.runs()) {
    int allowed_until = kEpochs - 1;
    for (const auto& d : store.prune_decisions(run.id)) {
      ASSERT_TRUE(loss[run.id].count(d.epoch)) << run.name << " decided at a missing epoch";
      EXPECT_EQ(loss[run.id][d.epoch], d.value) << run.name;
      for (const auto& other : nlohmann::json::parse(d.compared_json)) {
        const int64_t id = other.at("run_id").get<int64_t>();
        ASSERT_TRUE(loss[id].count(d.epoch)) << "compared with run " << id << " at " << d.epoch;
        EXPECT_EQ(loss[id][d.epoch], other.at("value").get<double>());
      }
      allowed_until = d.action == records::PruneAction::kStop ? d.epoch : kEpochs - 1;
    }
    EXPECT_LE(run.epochs_done - 1, allowed_until) << run.name << " trained after its stop";
  }
  for (const int rung_epoch : {0, 2}) {  // grace 1, eta 3: rungs after 1 and 3 epochs
    std::vector<double> there;
    for (const auto& [id, values] : loss) {
      if (values.count(rung_epoch)) there.push_back(values.at(rung_epoch));
    }
    std::sort(there.begin(), there.end());
    ASSERT_FALSE(there.empty());
    const double threshold = there[std::max<size_t>(1, there.size() / 3) - 1];
    for (const auto& [id, values] : loss) {
      if (!values.count(rung_epoch)) continue;
      EXPECT_EQ(values.rbegin()->first > rung_epoch, values.at(rung_epoch) <= threshold)
          << "run " << id << " at the rung after epoch " << rung_epoch << ": val_loss "
          << values.at(rung_epoch) << ", the final top 1/3 ends at " << threshold;
    }
  }
  // Each (run, epoch) line once in the log of every process.
  std::map<std::string, int> seen;
  const std::regex line("run (\\S+) epoch (\\d+): train_loss");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ(++seen[(*it)[1].str() + "@" + (*it)[2].str()], 1)
        << (*it)[1] << " epoch " << (*it)[2] << " trained twice";
  }
  int recorded = 0;
  for (const auto& [id, epochs] : loss) recorded += static_cast<int>(epochs.size());
  EXPECT_EQ(static_cast<int>(seen.size()), recorded);
}

TEST(Prune, AshaTrainsAtMostHalfTheEpochsAndKeepsTheFullGridsBestCell) {
  const auto full = cells_of(full_grid().db);
  ASSERT_EQ(total_epochs(full), 9 * kEpochs) << describe(full);

  const TinySweep f = make_grid(kAsha, "asha");
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;  // pruned cells do not fail the sweep
  const auto pruned = cells_of(f.db);
  EXPECT_LE(2 * total_epochs(pruned), total_epochs(full)) << describe(pruned);
  EXPECT_EQ(best_done(pruned), best_done(full))
      << "asha:" << describe(pruned) << "\nfull:" << describe(full);
  int stopped = 0;
  for (const auto& [index, c] : pruned) stopped += c.status == "pruned";
  EXPECT_GE(stopped, 6) << describe(pruned);
  EXPECT_NE(r.err.find("pruned after epoch"), std::string::npos) << r.err;
  expect_decisions_consistent(f.db, r.err);

  // Every pruned run shows why: amptune show prints its decisions with the evidence.
  store::Store store(f.db);
  for (const records::RunRow& run : store.runs()) {
    if (run.status != records::RunStatus::kPruned) continue;
    const auto decisions = store.prune_decisions(run.id);
    ASSERT_FALSE(decisions.empty()) << run.name;
    EXPECT_EQ(records::to_string(decisions.back().action), "stop");
    EXPECT_EQ(decisions.back().epoch, run.epochs_done - 1) << "stopped right after the decision";
    const Result show = run_amptune({"show", run.name, "--db", f.db}, f.dir);
    ASSERT_EQ(show.exit_code, 0) << show.err;
    EXPECT_NE(show.out.find("prune decisions:"), std::string::npos) << show.out;
    EXPECT_NE(show.out.find(decisions.back().reason), std::string::npos) << show.out;
  }
  const Result status = run_amptune({"status", "--db", f.db}, f.dir);
  EXPECT_NE(status.out.find("pruned " + std::to_string(stopped)), std::string::npos) << status.out;

  // Run again: nothing changes (pruned cells stay pruned, nothing is trained).
  const Result again = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(total_epochs(cells_of(f.db)), total_epochs(pruned));
  EXPECT_NE(again.err.find("is pruned"), std::string::npos) << again.err;
}

TEST(Prune, TwoWorkersDecideFromTheDatabaseAndTrainNoEpochTwice) {
  const TinySweep f = make_grid(kAsha, "workers");
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "--workers", "2"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cells = cells_of(f.db);
  EXPECT_LE(2 * total_epochs(cells), 9 * kEpochs) << describe(cells);
  EXPECT_EQ(best_done(cells), best_done(cells_of(full_grid().db))) << describe(cells);
  expect_decisions_consistent(f.db, r.err);
}

TEST(Prune, NoPruneContinuesAPrunedCellBitwise) {
  const TinySweep f = make_grid(kAsha, "continue");
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir).exit_code, 0);
  store::Store pruned_store(f.db);
  std::vector<std::string> pruned;
  for (const auto& run : pruned_store.runs()) {
    if (run.status == records::RunStatus::kPruned) pruned.push_back(run.name);
  }
  ASSERT_FALSE(pruned.empty());
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress", "--no-prune"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--no-prune"), std::string::npos) << r.err;
  // Every cell is done now, each epoch equal to the unpruned grid's: metrics and the sha256 of
  // every checkpoint.
  store::Store full(full_grid().db);
  for (const auto& run : store::Store(f.db).runs()) {
    EXPECT_EQ(run.status, records::RunStatus::kDone) << run.name;
    const auto mine = store::Store(f.db).epochs(run.id);
    const auto unpruned = full.find_run(run.name);
    ASSERT_TRUE(unpruned) << run.name << " is not in the full grid's database";
    const auto other = full.epochs(unpruned->id);
    ASSERT_EQ(mine.size(), other.size()) << run.name;
    for (size_t e = 0; e < mine.size(); ++e) {
      EXPECT_EQ(mine[e].train_loss, other[e].train_loss) << run.name << " epoch " << e;
      EXPECT_EQ(mine[e].metrics.at("val_loss"), other[e].metrics.at("val_loss")) << run.name;
      ASSERT_TRUE(mine[e].checkpoint && other[e].checkpoint);
      EXPECT_EQ(mine[e].checkpoint->sha256, other[e].checkpoint->sha256)
          << run.name << " epoch " << e;
    }
    if (std::find(pruned.begin(), pruned.end(), run.name) != pruned.end()) {
      const auto decisions = store::Store(f.db).prune_decisions(run.id);
      ASSERT_GE(decisions.size(), 2u) << run.name;
      EXPECT_EQ(records::to_string(decisions.back().action), "continue");
    }
  }
}

// --nproc 2: rank 0 decides from the database, and both ranks stop a pruned cell together (the
// next step's vote), so the job goes on with the next cell and ends with exit code 0.
TEST(Prune, ADataParallelJobStopsAPrunedCellOnEveryRank) {
  TinyOptions o = quick_tiny(
      "grid:\n  optim.lr: [0.0002, 0.001, 0.1]\n"
      "prune: {rule: asha, metric: val_loss, eta: 3}\n",
      3);
  o.name = "dp_prune";
  o.dir_tag = "nproc";
  const TinySweep f = make_tiny_sweep(o);
  const Result r =
      run_amptune({"run", f.yaml, "--db", f.db, "--no-progress", "--nproc", "2"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(f.db);
  int pruned = 0, done = 0;
  for (const records::RunRow& run : store.runs()) {
    if (run.status == records::RunStatus::kPruned) {
      ++pruned;
      const auto decisions = store.prune_decisions(run.id);
      ASSERT_FALSE(decisions.empty()) << run.name;
      EXPECT_EQ(run.epochs_done, decisions.back().epoch + 1) << run.name << " trained on";
      EXPECT_EQ(run.provenance.world_size, 2) << run.name;
    } else {
      EXPECT_EQ(run.status, records::RunStatus::kDone) << run.name << ": " << run.message;
      ++done;
    }
  }
  // Three cells at the rung after 1 epoch, eta 3: the best goes on, the other two stop there.
  EXPECT_EQ(pruned, 2) << r.err;
  EXPECT_EQ(done, 1) << r.err;
  EXPECT_EQ(r.err.find("lost"), std::string::npos) << r.err;
}

TEST(Prune, BadBlocksExitThreeAndWriteNothing) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"prune: {rule: hyperband}\n", "prune.rule"},
      {"prune: {rule: asha, eta: 1}\n", "prune.eta"},
      {"prune: {rule: median, metric: mrpe}\n", "prune.metric mrpe is not a metric resnet18"},
      {"prune: {rule: asha, etta: 3}\n", "prune.etta"},
      {"prune: [asha]\n", "prune must be a mapping"},
  };
  for (const auto& [block, expected] : cases) {
    TinyOptions o = quick_tiny("grid:\n  optim.lr: [0.01, 0.1]\n" + block, 2);
    o.dir_tag = "bad";
    const TinySweep f = make_tiny_sweep(o);
    const Result r = run_amptune({"run", f.yaml, "--db", f.db}, f.dir);
    EXPECT_EQ(r.exit_code, 3) << block << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << block << r.err;
    EXPECT_NE(r.err.find("sweep.yaml:"), std::string::npos) << "names the file: " << r.err;
    EXPECT_FALSE(fs::exists(f.db)) << block << ": a database was written";
  }
}

}  // namespace
}  // namespace amptune::testing
