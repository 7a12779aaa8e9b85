// amptune tune with the real binary (docs/TUNE.md): the search finds the planted conv1 overflow
// and fixes it with fewer epochs than the grid of its moves, takes a start already within
// tolerance as it is, bisects fp32 modules down to the one that matters, fixes two overflows in
// different stages at once and with a static loss scale too high, continues after SIGKILL with
// the same answer and no recorded epoch trained again, gives the same answer with two worker
// processes, and refuses bad tune: blocks before anything is written.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

// The planted problem of amp_cli_test: tiny images left unnormalised (mean -1, std 1.6e-5:
// values 62500 to 125000), fine in fp32, beyond fp16's 65504 once conv1 casts them under O1.
// The metric is the training loss: with such inputs BatchNorm's running statistics need more
// than 12 steps to settle, so the evaluation says little in 3 short epochs, while the training
// loss of O0 and of O1 with conv1 in fp32 falls alike (1.2, 0.6, 0.1) and is NaN under overflow.
const std::vector<std::string> kPlanted = {"--set", "data.mean=[-1.0]", "--set",
                                           "data.std=[0.000016]"};

const std::string kTune =
    "tune:\n"
    "  metric: train_loss\n"
    "  tolerance: {abs: 0.1}\n"
    "  reference: {amp.opt_level: O0}\n";

// `test_n`: test images evaluated after every epoch (the metric is the training loss, so they
// change no result, only how long an epoch takes).
TinySweep tune_sweep(const std::string& start, const std::string& tag, const std::string& more = "",
                     int test_n = 32) {
  TinyOptions o = quick_tiny(kTune + "  start: " + start + "\n" + more, 3);
  o.name = "tuned";
  o.dir_tag = tag;
  o.test_n = test_n;
  o.base = "  amp: {loss_scale: dynamic, max_loss_scale: 1024}\n";
  return make_tiny_sweep(o);
}

std::vector<std::string> tune_args(const TinySweep& f, bool planted,
                                   const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"tune", f.yaml, "--db", f.db, "--no-progress"};
  if (planted) args.insert(args.end(), kPlanted.begin(), kPlanted.end());
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// What a finished search says, and what it trained.
struct Search {
  records::TuneSearchRow row;
  std::vector<records::TuneRoundRow> rounds;
  std::vector<records::TuneCandidateRow> candidates;
  std::string answer_run, answer_modules;  // name; amp.fp32_modules as JSON
  std::set<std::string> runs;              // names of every run of the sweep
  int epoch_rows = 0;                      // recorded epochs of every run
};

Search search_of(const std::string& db) {
  store::Store store(db);
  Search s;
  const auto searches = store.tune_searches("tuned");
  EXPECT_EQ(searches.size(), 1u);
  if (searches.empty()) return s;
  s.row = searches.back();
  s.rounds = store.tune_rounds(s.row.id);
  s.candidates = store.tune_candidates(s.row.id);
  for (const auto& run : store.runs("tuned")) {
    s.runs.insert(run.name);
    s.epoch_rows += static_cast<int>(store.epochs(run.id).size());
    if (run.id == s.row.answer_run_id) {
      s.answer_run = run.name;
      s.answer_modules =
          nlohmann::json::parse(run.config_json).at("amp").at("fp32_modules").dump();
    }
  }
  return s;
}

const std::string kSeedStart = "{amp.opt_level: O1, amp.loss_scale: 128}";

// The planted overflow, an O1 start with the static scale 128: the diagnosis names conv1, the
// search keeps it in fp32 and ends within tolerance of O0, stopping the other candidate at the
// first rung - fewer epochs than the grid of its two moves.
TEST(TuneCli, FindsThePlantedOverflowAndSpendsLessThanTheGrid) {
  const TinySweep f = tune_sweep(kSeedStart, "planted");
  const Result r = run_amptune(tune_args(f, true), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Search s = search_of(f.db);
  EXPECT_EQ(records::to_string(s.row.status), "answered") << s.row.note;
  EXPECT_EQ(s.answer_modules, R"(["conv1"])");
  EXPECT_LE(s.row.answer_value, s.row.reference_value + 0.1);
  ASSERT_FALSE(s.candidates.empty());
  // The path starts from the diagnosis that names conv1.
  EXPECT_EQ(s.candidates[0].advice_rule, records::AdviceRule::kActivationOverflow);
  EXPECT_EQ(s.candidates[0].advice_module, "conv1");
  EXPECT_EQ(s.candidates[0].move, TuneMoveKind::kFp32Modules);
  EXPECT_EQ(records::to_string(s.candidates[0].outcome), "within");
  EXPECT_EQ(s.candidates[0].run_id, s.row.answer_run_id);
  bool pruned = false;
  for (const auto& c : s.candidates)
    pruned = pruned || c.outcome == records::CandidateOutcome::kPruned;
  EXPECT_TRUE(pruned) << "the other candidate stops at the first rung";
  EXPECT_LT(s.row.epochs_spent, s.row.grid_epochs);
  EXPECT_EQ(s.row.epochs_spent, s.epoch_rows) << "the ledger counts what was trained";
  EXPECT_NE(r.out.find("paste into base:\n  amp.opt_level: O1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  amp.fp32_modules: [conv1]\n"), std::string::npos) << r.out;
  // The diagnosis the advice came from is stored beside it.
  store::Store store(f.db);
  const auto q = store.query(
      "SELECT COUNT(*) FROM diagnosis_advice a JOIN tune_rounds t ON t.start_run_id = a.run_id "
      "AND t.diagnosis_epoch = a.epoch WHERE a.rule = 'activation_overflow' AND "
      "a.module = 'conv1'");
  EXPECT_EQ(q.rows.at(0)[0], "1");
  // --status prints the same path from the database; running again trains nothing.
  const Result status = run_amptune({"tune", f.yaml, "--db", f.db, "--status"}, f.dir);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("activation_overflow conv1"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("within (answer)"), std::string::npos) << status.out;
  const Result again = run_amptune(tune_args(f, true), f.dir);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(search_of(f.db).epoch_rows, s.epoch_rows);
}

TEST(TuneCli, AStartWithinToleranceIsTheAnswerAndNothingElseTrains) {
  const TinySweep f = tune_sweep("{amp.opt_level: O1}", "within");
  const Result r = run_amptune(tune_args(f, false), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Search s = search_of(f.db);
  EXPECT_EQ(records::to_string(s.row.status), "answered");
  EXPECT_EQ(s.row.answer_run_id, s.row.start_run_id);
  EXPECT_TRUE(s.rounds.empty());
  EXPECT_EQ(s.runs.size(), 2u);  // the reference and the start
  EXPECT_EQ(s.row.epochs_spent, 6);
  EXPECT_NE(r.out.find("paste into base:\n  amp.opt_level: O1\n"), std::string::npos) << r.out;
}

TEST(TuneCli, BisectionKeepsTheOneFp32ModuleThatMatters) {
  const TinySweep f =
      tune_sweep("{amp.opt_level: O1, amp.fp32_modules: [conv1, layer1, layer2, fc]}", "bisect");
  const Result r = run_amptune(tune_args(f, true), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Search s = search_of(f.db);
  EXPECT_EQ(records::to_string(s.row.status), "answered") << s.row.note;
  EXPECT_EQ(s.answer_modules, R"(["conv1"])");
  std::vector<std::string> outcomes;
  for (const auto& c : s.candidates)
    outcomes.push_back(c.change_json + " " + records::to_string(c.outcome));
  EXPECT_EQ(outcomes, (std::vector<std::string>{
                          // (conv1 overflows: the loss is NaN at the end, a divergence)
                          R"({"amp.fp32_modules":["layer2","fc"]} diverged)",
                          R"({"amp.fp32_modules":["layer1","layer2","fc"]} diverged)",
                          R"({"amp.fp32_modules":["conv1","layer2","fc"]} within)",
                          R"({"amp.fp32_modules":["conv1"]} within)",
                      }));
  for (const auto& round : s.rounds) EXPECT_EQ(records::to_string(round.kind), "bisect");
  EXPECT_NE(r.out.find("  amp.fp32_modules: [conv1]\n"), std::string::npos) << r.out;
}

// The planted problem with a second overflow in another stage: layer2.0.conv1's weight x 30000
// (amptune data plant-weights; its fp16 outputs exceed 65504, in fp32 its BatchNorm normalises
// them). Under O1 with conv1 alone or layer2.0.conv1 alone in fp32 every step still overflows.
TinySweep two_overflows_sweep(const std::string& start, const std::string& tag) {
  TinyOptions o = quick_tiny(kTune + "  start: " + start + "\n", 3);
  o.name = "tuned";
  o.dir_tag = tag;
  o.model =
      "{name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, small_input: true, "
      "weights: planted.pt}";
  o.base = "  amp: {loss_scale: dynamic, max_loss_scale: 1024}\n";
  const TinySweep f = make_tiny_sweep(o);
  const Result r = run_amptune({"data", "plant-weights", f.yaml, "--scale",
                                "layer2.0.conv1.weight=30000", "--out", "planted.pt"},
                               f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return f;
}

// The modules the bisection probes of `s` kept, with each probe's outcome.
std::vector<std::string> bisection_of(const Search& s) {
  std::set<int> bisect_rounds;
  for (const auto& round : s.rounds) {
    if (round.kind == records::TuneRoundKind::kBisect) bisect_rounds.insert(round.round);
  }
  std::vector<std::string> out;
  for (const auto& c : s.candidates) {
    if (bisect_rounds.count(c.round))
      out.push_back(c.change_json + " " + records::to_string(c.outcome));
  }
  return out;
}

// The search of `f` on the planted data (its output in `r`): answered within tolerance, both
// planted modules kept in fp32, the ledger equal to the epochs recorded.
Search search_keeping_both(const TinySweep& f, Result& r) {
  r = run_amptune(tune_args(f, true), f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const Search s = search_of(f.db);
  EXPECT_EQ(records::to_string(s.row.status), "answered") << s.row.note << "\n" << r.out;
  EXPECT_EQ(s.answer_modules, R"(["conv1","layer2.0.conv1"])") << r.out;
  EXPECT_LE(s.row.answer_value, s.row.reference_value + 0.1);
  EXPECT_EQ(s.row.epochs_spent, s.epoch_rows) << "the ledger counts what was trained";
  return s;
}

// (a) Two overflows in different stages of one network under O1: the diagnosis names both, one
// candidate keeps both in fp32 and ends within tolerance, and bisection shows each one matters.
TEST(TuneCli, TwoOverflowsInDifferentStagesAreBothKeptInFp32) {
  Result r;
  const Search s = search_keeping_both(two_overflows_sweep("{amp.opt_level: O1}", "two"), r);
  ASSERT_FALSE(s.candidates.empty());
  EXPECT_EQ(s.candidates[0].advice_module, "conv1,layer2.0.conv1") << r.out;
  EXPECT_EQ(records::to_string(s.candidates[0].outcome), "within") << r.out;
  EXPECT_EQ(bisection_of(s), (std::vector<std::string>{
                                 R"({"amp.fp32_modules":["layer2.0.conv1"]} pruned)",
                                 R"({"amp.fp32_modules":["conv1"]} pruned)",
                             }))
      << "each probe is the single-module candidate of round 1, stopped at its rung, diverging: "
      << r.out;
  EXPECT_LE(s.row.epochs_spent, s.row.grid_epochs);
  EXPECT_NE(r.out.find("  amp.fp32_modules: [conv1, layer2.0.conv1]\n"), std::string::npos)
      << r.out;
}

// (b) Faults of different kinds at once: the two overflows and a static loss scale so high that
// the scaled gradients overflow fp16 (2^24). The answer is within tolerance, keeps both modules in
// fp32 and scales dynamically; each move of the path names the advice row it came from.
TEST(TuneCli, OverflowsAndAStaticScaleTooHighAreEachFixedWithTheirReason) {
  const TinySweep f =
      two_overflows_sweep("{amp.opt_level: O1, amp.loss_scale: 16777216}", "three");
  Result r;
  const Search s = search_keeping_both(f, r);
  {
    store::Store store(f.db);
    const auto answer = store.find_run(s.row.answer_run_id);
    ASSERT_TRUE(answer);
    EXPECT_EQ(nlohmann::json::parse(answer->config_json).at("amp").at("loss_scale"), "dynamic");
  }
  const size_t paste = r.out.find("paste into base:\n");
  ASSERT_NE(paste, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(paste, r.out.find("epochs:", paste) - paste),
            "paste into base:\n  amp.opt_level: O1\n  amp.fp32_modules: [conv1, layer2.0.conv1]\n")
      << "the base scales dynamically: the answer's keys do not repeat it";
  for (const auto& c : s.candidates) EXPECT_FALSE(c.reason.empty());
  // The answer's path: the overflowing modules kept together (round 1, diverging at the static
  // scale but furthest), then the scale made dynamic from it (round 2).
  std::vector<std::string> path;
  for (const auto& c : s.candidates) {
    if (c.round <= 2 && c.seq == 0) {
      path.push_back(to_string(c.move.value()) + " " +
                     (c.advice_rule ? records::to_string(*c.advice_rule) : std::string()));
    }
  }
  ASSERT_GE(path.size(), 2u) << r.out;
  EXPECT_EQ(path[0], "fp32_modules activation_overflow") << r.out;
  EXPECT_EQ(path[1].substr(0, 10), "loss_scale") << r.out;
}

// The recorded_at of every epoch row, by run name and epoch.
std::map<std::pair<std::string, int>, std::string> epoch_stamps(const std::string& db) {
  store::Store store(db);
  std::map<std::pair<std::string, int>, std::string> out;
  for (const auto& run : store.runs()) {
    for (const auto& e : store.epochs(run.id)) out[{run.name, e.epoch}] = e.recorded_at;
  }
  return out;
}

// Each epoch evaluates 5000 test images (about 0.7 s here), so the round the child is
// killed in still has seconds to run when the poll below sees its first epoch: with 32, the
// whole round took a quarter of a second and a loaded machine could let the child finish first.
const int kSlowEpochTestImages = 5000;

TEST(TuneCli, ASearchKilledInARoundContinuesWithTheSameAnswerAndTwoWorkersAgree) {
  const TinySweep whole = tune_sweep(kSeedStart, "whole", "", kSlowEpochTestImages);
  ASSERT_EQ(run_amptune(tune_args(whole, true), whole.dir).exit_code, 0);
  const Search expected = search_of(whole.db);
  ASSERT_EQ(records::to_string(expected.row.status), "answered");

  // SIGKILL once a candidate of round 1 has recorded an epoch.
  const TinySweep killed = tune_sweep(kSeedStart, "killed", "", kSlowEpochTestImages);
  const pid_t pid = spawn_amptune(tune_args(killed, true), killed.dir);
  {
    StopOnExit guard(pid);
    bool in_round = false;
    for (int i = 0; i < 6000 && !in_round; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!fs::exists(killed.db)) continue;
      try {
        store::Store store(killed.db);
        const auto q = store.query(
            "SELECT COUNT(*) FROM tune_candidates c JOIN epochs e ON e.run_id = c.run_id");
        in_round = q.rows.at(0)[0] != "0";
      } catch (const std::exception&) {
        // the schema is being created
      }
    }
    ASSERT_TRUE(in_round) << read_file(killed.dir + "/child.err");
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_EQ(wait_exit_code(pid), 128 + SIGKILL)
        << "the search finished before it could be killed";
  }
  const auto before = epoch_stamps(killed.db);
  const Result rerun = run_amptune(tune_args(killed, true), killed.dir);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  const Search resumed = search_of(killed.db);
  EXPECT_EQ(records::to_string(resumed.row.status), "answered");
  EXPECT_EQ(resumed.answer_run, expected.answer_run);
  EXPECT_EQ(resumed.row.answer_yaml, expected.row.answer_yaml);
  EXPECT_EQ(resumed.runs, expected.runs);
  EXPECT_EQ(resumed.row.epochs_spent, expected.row.epochs_spent);
  const auto after = epoch_stamps(killed.db);
  for (const auto& [key, stamp] : before) {
    EXPECT_EQ(after.at(key), stamp) << key.first << " epoch " << key.second << " trained again";
  }

  // Two worker processes share the search: the same runs, the same answer.
  const TinySweep two = tune_sweep(kSeedStart, "workers", "", kSlowEpochTestImages);
  const Result shared = run_amptune(tune_args(two, true, {"--workers", "2"}), two.dir);
  ASSERT_EQ(shared.exit_code, 0) << shared.err;
  const Search by_two = search_of(two.db);
  EXPECT_EQ(by_two.answer_run, expected.answer_run);
  EXPECT_EQ(by_two.row.answer_yaml, expected.row.answer_yaml);
  EXPECT_EQ(by_two.runs, expected.runs);
  EXPECT_EQ(by_two.epoch_rows, expected.epoch_rows);
  EXPECT_NE(shared.out.find("(answer)"), std::string::npos) << shared.out;
}

// --nproc 2: every run of the search is a data-parallel job of two processes (rank 0 plans,
// diagnoses and records; the ranks train together).
TEST(TuneCli, EachRunOfTheSearchTrainsWithNprocRanks) {
  const TinySweep f = tune_sweep(kSeedStart, "nproc");
  const Result r = run_amptune(tune_args(f, true, {"--nproc", "2"}), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Search s = search_of(f.db);
  EXPECT_EQ(records::to_string(s.row.status), "answered") << s.row.note;
  EXPECT_EQ(s.answer_modules, R"(["conv1"])");
  store::Store store(f.db);
  for (const auto& run : store.runs("tuned")) {
    EXPECT_EQ(run.provenance.world_size, 2) << run.name;
  }
}

// Each bad block: exit 3, a message naming the place, no database written.
TEST(TuneCli, BadTuneBlocksAreRefusedBeforeAnythingIsWritten) {
  struct Case {
    std::string start, more, expect;
  };
  const std::vector<Case> cases = {
      {"{amp.opt_level: O1}", "  moves: [loss_scale, fp64]\n", "tune.moves[1] must be one of"},
      {"{amp.opt_level: O1}", "  budget: {epochs: 6}\n",
       "tune.budget.epochs 6 cannot train the reference and the start (6 epochs)"},
      {"{amp.opt_level: O1}", "  reference_repeats: 3\n  budget: {epochs: 12}\n",
       "tune.budget.epochs 12 cannot train the reference 3 times and the start (12 epochs)"},
      {"{amp.opt_level: O1}", "  reference_repeats: 17\n", "tune.reference_repeats"},
      {"{amp.opt_level: O0}", "", "tune.start is the reference's setting"},
      {"{amp.opt_level: O1}", "  halving: {eta: 1}\n", "tune.halving.eta"},
  };
  for (const Case& c : cases) {
    const TinySweep f = tune_sweep(c.start, "bad" + std::to_string(&c - cases.data()), c.more);
    const Result r = run_amptune(tune_args(f, false), f.dir);
    EXPECT_EQ(r.exit_code, 3) << c.expect;
    EXPECT_NE(r.err.find(f.yaml + ":"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(f.db)) << c.expect;
  }
  // A metric the model does not record, and tolerance 0.
  TinyOptions o = quick_tiny("tune:\n  metric: mrpe\n  tolerance: {abs: 0.5}\n"
                             "  reference: {amp.opt_level: O0}\n  start: {amp.opt_level: O1}\n",
                             3);
  o.name = "tuned";
  o.dir_tag = "metric";
  TinySweep f = make_tiny_sweep(o);
  Result r = run_amptune({"tune", f.yaml, "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find(f.yaml + ":10:11: tune.metric mrpe is not a metric resnet18 records; it "
                                "records acc1, acc5, val_loss, train_loss"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(f.db));
  // --dry-run checks and prints the plan, writing nothing.
  f = tune_sweep("{amp.opt_level: O1}", "dry");
  r = run_amptune({"tune", f.yaml, "--db", f.db, "--dry-run"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("start:\n  amp.opt_level: O1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("budget 24 epochs"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(f.db));
}

}  // namespace
}  // namespace amptune::testing
