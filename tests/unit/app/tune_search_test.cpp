// The search of amptune tune (app/tune/tune_search.h) over a scripted executor: a world of planted
// faults, each with its effect on the metric curve and the advice a diagnosis gives for it, in
// which runs are made, forked and trained as the database executor makes them. Two faults, three
// faults of different kinds, a candidate that diverges late, the union of moves that each help,
// noise at the tolerance edge, and a search stopped after every training step and run again.
// Milliseconds: no torch, no database.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/tune/tune_search.h"

namespace amptune::app {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A planted fault: fixed when `fixed(config)`; unfixed it makes a run diverge in epoch
// `diverge_at` (-1: never) and adds `penalty` to its metric (lower is better); a diagnosis at an
// epoch >= `visible_from` gives `advice` for it.
struct Fault {
  std::function<bool(const Config&)> fixed;
  int diverge_at = -1;
  double penalty = 0;
  records::DiagnosisAdvice advice;
  int visible_from = 0;
};

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

Fault overflow(const std::string& module, int diverge_at = 0) {
  return {[module](const Config& c) {
            return c.get_string("amp.opt_level") == "O0" ||
                   has(c.get_string_list("amp.fp32_modules"), module);
          },
          diverge_at, 0, {records::AdviceRule::kActivationOverflow, module, "overflow"}};
}

Fault static_scale_too_high() {
  return {[](const Config& c) { return c.at("amp.loss_scale") == "dynamic"; },
          0, 0, {records::AdviceRule::kGradientOverflow, "fc.weight", "scaled gradients overflow"}};
}

Fault truncating_cast(const std::string& point, double penalty) {
  return {[point](const Config& c) { return !has(c.get_string_list("casts.int32"), point); },
          -1, penalty, {records::AdviceRule::kCastPoint, point, "truncates"}};
}

struct FakeRun {
  int64_t id = 0;
  std::string name;
  Config config;
  int64_t parent = 0;
  int fork_epoch = -1;
  int done = 0;  // epochs recorded, its ancestors' included (a fork starts at fork_epoch + 1)
  records::RunStatus status = records::RunStatus::kPending;
};

// The world: the reference's curve 1.0 - 0.1 e, each run's the same plus its unfixed faults'
// penalties, missing from the epoch its first unfixed divergence happens in. Seeds shift the
// curve by `seed_noise` x (seed - 1).
class World : public TuneExecutor {
 public:
  World(std::vector<Fault> faults, int epochs) : faults_(std::move(faults)), epochs_(epochs) {}

  double seed_noise = 0;
  int stop_after_trainings = -1;  // a signal after this many train_to calls (-1: none)
  int trainings = 0, diagnoses = 0;
  std::map<int64_t, int> trained_epochs;  // per run, every epoch trained (twice counts twice)
  std::vector<records::TuneRoundRow> rounds;
  std::vector<records::TuneCandidateRow> candidates;
  std::optional<records::TuneSearchRow> search;

  double value(const Config& c, int epoch) const {
    double v = 1.0 - 0.1 * epoch + seed_noise * static_cast<double>(c.get_int("seed") - 1);
    for (const Fault& f : faults_) {
      if (!f.fixed(c)) v += f.penalty;
    }
    return v;
  }
  int diverges_at(const Config& c) const {
    int at = epochs_;
    for (const Fault& f : faults_) {
      if (!f.fixed(c) && f.diverge_at >= 0) at = std::min(at, f.diverge_at);
    }
    return at;
  }
  const FakeRun& run(int64_t id) const { return runs_.at(static_cast<size_t>(id - 1)); }
  std::vector<std::string> fp32_modules_of_answer() const {
    return run(search->answer_run_id).config.get_string_list("amp.fp32_modules");
  }

  int64_t fresh_run(const Config& config, const std::string& label, bool) override {
    return find_or_make(config, 0, -1, label);
  }
  int64_t candidate_run(int64_t from, int epoch, const Overrides& change,
                        const std::string& label) override {
    Config config = run(from).config;
    for (const auto& [key, value] : change) config.set(key, value);
    if (epoch < 0 || !kept(from, epoch)) return find_or_make(config, 0, -1, label);
    return find_or_make(config, owner(from, epoch), epoch, label);
  }
  bool kept(int64_t id, int epoch) override {
    return epoch >= 0 && run(owner(id, epoch)).done > epoch;
  }
  bool train_to(const std::vector<int64_t>& ids, int epoch) override {
    if (stop_after_trainings >= 0 && trainings >= stop_after_trainings) return false;
    ++trainings;
    for (const int64_t id : ids) train(runs_[static_cast<size_t>(id - 1)], epoch);
    return true;
  }
  RunView view(int64_t id) override {
    const FakeRun& r = run(id);
    RunView v;
    v.id = r.id;
    v.name = r.name;
    v.config = r.config;
    v.parent = r.parent;
    v.fork_epoch = r.fork_epoch;
    v.curve.status = r.status;
    for (int e = 0; e < r.done; ++e) {
      const FakeRun& at = run(owner(id, e));
      v.curve.values[e] = value(at.config, e);
    }
    return v;
  }
  int trained(int64_t id, int after, int upto) override {
    const FakeRun& r = run(id);
    int n = 0;
    for (int e = std::max(after + 1, r.fork_epoch + 1); e <= upto && e < r.done; ++e) ++n;
    return n;
  }
  std::vector<records::DiagnosisAdvice> diagnose(int64_t id, int epoch) override {
    ++diagnoses;
    std::vector<records::DiagnosisAdvice> out;
    for (const Fault& f : faults_) {
      if (!f.fixed(run(id).config) && std::max(epoch, 0) >= f.visible_from) out.push_back(f.advice);
    }
    return out;
  }
  void prune(const records::PruneDecisionRow& d) override {
    FakeRun& r = runs_[static_cast<size_t>(d.run_id - 1)];
    if (r.status == records::RunStatus::kPending || r.status == records::RunStatus::kRunning) {
      r.status = records::RunStatus::kPruned;
    }
  }
  double fp32_share(int64_t id) override {
    return 0.1 * static_cast<double>(run(id).config.get_string_list("amp.fp32_modules").size());
  }
  // Under FP8 each module kept out of it takes 10 % of the work back from 90 %.
  double fp8_share(int64_t id) override {
    const Config& c = run(id).config;
    if (!c.get_bool("amp.fp8.enabled")) return 0;
    return 0.9 - 0.1 * static_cast<double>(c.get_string_list("amp.fp8.skip_modules").size());
  }
  double speed(int64_t) override { return 0; }
  records::TuneSearchRow open_search(const records::TuneSearchRow& row) override {
    if (!search) {
      search = row;
      search->id = 1;
    }
    return *search;
  }
  void record_round(const records::TuneRoundRow& r) override {
    for (const auto& have : rounds) {
      if (have.round == r.round) return;
    }
    rounds.push_back(r);
  }
  void record_candidate(const records::TuneCandidateRow& c) override {
    for (const auto& have : candidates) {
      if (have.round == c.round && have.seq == c.seq) return;
    }
    candidates.push_back(c);
  }
  void update_candidate(const records::TuneCandidateRow& c) override {
    for (auto& have : candidates) {
      if (have.round == c.round && have.seq == c.seq) have = c;
    }
  }
  void finish_search(const records::TuneSearchRow& s) override { search = s; }

  std::string kind_of(int round) const {
    for (const auto& r : rounds) {
      if (r.round == round) return records::to_string(r.kind);
    }
    return "";
  }

 private:
  int64_t owner(int64_t id, int epoch) const {
    while (run(id).parent && epoch <= run(id).fork_epoch) id = run(id).parent;
    return id;
  }
  int64_t find_or_make(const Config& config, int64_t parent, int fork_epoch,
                       const std::string& label) {
    for (const FakeRun& r : runs_) {
      if (r.config.hash() == config.hash() && r.parent == parent && r.fork_epoch == fork_epoch) {
        return r.id;
      }
    }
    FakeRun r;
    r.id = static_cast<int64_t>(runs_.size()) + 1;
    r.name = "run" + std::to_string(r.id) + " [" + label + "]";
    r.config = config;
    r.parent = parent;
    r.fork_epoch = fork_epoch;
    r.done = fork_epoch + 1;
    runs_.push_back(r);
    return r.id;
  }
  void train(FakeRun& r, int epoch) {
    if (r.status != records::RunStatus::kPending && r.status != records::RunStatus::kRunning)
      return;
    const int diverge = diverges_at(r.config);
    while (r.done <= epoch) {
      if (r.done >= diverge) {
        r.status = records::RunStatus::kDiverged;
        return;
      }
      ++r.done;
      ++trained_epochs[r.id];
    }
    r.status = r.done == epochs_ ? records::RunStatus::kDone : records::RunStatus::kRunning;
  }

  std::vector<Fault> faults_;
  int epochs_;
  std::vector<FakeRun> runs_;
};

SearchSpec spec_of(const Overrides& start, int epochs = 4) {
  SearchSpec spec;
  spec.block.moves = {TuneMoveKind::kLossScale, TuneMoveKind::kKeepBatchnormFp32,
                      TuneMoveKind::kFp32Modules, TuneMoveKind::kCasts, TuneMoveKind::kOptLevel};
  spec.block.canonical = "{}";
  spec.base.set("schedule.epochs", epochs);
  spec.base.set("amp.loss_scale", "dynamic");
  spec.reference = spec.base;
  spec.reference.set("amp.opt_level", "O0");
  spec.start = spec.base;
  for (const auto& [key, value] : start) spec.start.set(key, value);
  spec.metric = "train_loss";
  spec.tolerance.abs = 0.1;
  spec.tolerance.higher_is_better = false;
  spec.epochs = epochs;
  spec.budget = 200;
  return spec;
}

// "round kind move outcome" per candidate, in order.
std::vector<std::string> path_of(const World& w) {
  std::vector<std::string> out;
  for (const auto& c : w.candidates) {
    out.push_back(std::to_string(c.round) + " " + w.kind_of(c.round) + " " + to_string(*c.move) +
                  " " + records::to_string(c.outcome));
  }
  return out;
}

std::string dump(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// The three planted FP8 faults of docs/TUNE.md "FP8" at once, against the BF16 reference: a
// layer whose small values underflow, one whose amax jumps (delayed scaling saturates it) and an
// output head that must stay out of FP8. Each move alone leaves the others' penalties: each round
// carries the candidate that got furthest and adds the next fix; bisection keeps both modules.
Fault fp8_fault(const std::string& key, const nlohmann::json& value, records::AdviceRule rule,
                const std::string& module, double penalty) {
  return {[=](const Config& c) {
            if (!c.get_bool("amp.fp8.enabled")) return true;
            const nlohmann::json& v = c.at(key);
            if (!v.is_array()) return v == value;
            return has(c.get_string_list(key), value.get<std::string>());
          },
          -1, penalty, {rule, module, records::to_string(rule)}};
}

TEST(TuneSearch, ThreeFp8FaultsAreEachFixedByTheirMove) {
  using records::AdviceRule;
  World w({fp8_fault("amp.fp8.skip_modules", "layer2.0.conv1", AdviceRule::kFp8KeepOut,
                     "layer2.0.conv1", 0.5),
           fp8_fault("amp.fp8.recipe", "current", AdviceRule::kFp8CurrentScaling, "layer3.0.conv1",
                     0.4),
           fp8_fault("amp.fp8.skip_modules", "fc", AdviceRule::kFp8KeepOut, "fc", 0.3)},
          4);
  SearchSpec spec = spec_of({{"amp.fp8.enabled", true}});
  spec.block.moves = {TuneMoveKind::kFp8SkipModules, TuneMoveKind::kFp8Recipe,
                      TuneMoveKind::kFp8Margin, TuneMoveKind::kFp8History};
  spec.base.set("amp.opt_level", "O1");
  spec.base.set("amp.dtype", "bf16");
  spec.reference = spec.base;  // BF16
  spec.start = with(spec.base, {{"amp.fp8.enabled", true}});
  run_search(w, spec, 1);
  const auto path = path_of(w);
  ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note << "\n"
                                                            << dump(path);
  const Config& answer = w.run(w.search->answer_run_id).config;
  EXPECT_EQ(answer.get_string("amp.fp8.recipe"), "current");
  EXPECT_EQ(answer.get_string_list("amp.fp8.skip_modules"),
            (std::vector<std::string>{"layer2.0.conv1", "fc"}));
  EXPECT_EQ(w.search->answer_yaml,
            "amp.fp8.enabled: true\namp.fp8.recipe: current\n"
            "amp.fp8.skip_modules: [layer2.0.conv1, fc]\n");
  // Round 1: the three advice moves, then the margin and the history of the move order.
  ASSERT_GE(path.size(), 5u) << dump(path);
  EXPECT_EQ(path[0], "1 search fp8_skip_modules outside") << dump(path);
  EXPECT_EQ(to_string(*w.candidates[1].move), "fp8_recipe") << dump(path);
  EXPECT_EQ(w.candidates[1].advice_rule, AdviceRule::kFp8CurrentScaling);
  EXPECT_EQ(w.candidates[2].advice_module, "fc");
  EXPECT_EQ(to_string(*w.candidates[3].move), "fp8_margin") << dump(path);
  EXPECT_EQ(to_string(*w.candidates[4].move), "fp8_history") << dump(path);
  // Bisection tried dropping each module kept out of FP8: neither may go.
  int probes = 0;
  for (const auto& c : w.candidates) {
    if (w.kind_of(c.round) != "bisect") continue;
    ++probes;
    EXPECT_EQ(to_string(*c.move), "fp8_skip_modules");
    EXPECT_NE(records::to_string(c.outcome), "within") << dump(path);
  }
  EXPECT_EQ(probes, 2) << dump(path);
}

// Two layers that overflow fp16 in different stages; the diagnosis names both: one round keeps
// them together, beside each alone, and bisection shows both matter.
TEST(TuneSearch, TwoOverflowsNamedTogetherAreKeptTogether) {
  World w({overflow("conv1"), overflow("layer3.0.conv1")}, 4);
  const SearchSpec spec = spec_of({{"amp.opt_level", "O1"}});
  const SearchResult r = run_search(w, spec, 1);
  ASSERT_FALSE(r.stopped);
  ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note << "\n"
                                                            << dump(path_of(w));
  EXPECT_EQ(w.fp32_modules_of_answer(), (std::vector<std::string>{"conv1", "layer3.0.conv1"}));
  EXPECT_EQ(path_of(w)[0], "1 search fp32_modules within") << "both modules together";
  EXPECT_EQ(w.candidates[0].advice_module, "conv1,layer3.0.conv1");
  // Bisection: without either one the run diverges again.
  int bisect_probes = 0;
  for (const auto& c : w.candidates) {
    if (w.kind_of(c.round) == "bisect") {
      ++bisect_probes;
      EXPECT_EQ(records::to_string(c.outcome), "diverged");
    }
  }
  EXPECT_EQ(bisect_probes, 2);
}

// The diagnosis sees only the first overflow (the second shows later): the diverged candidate
// that fixed the first is the right first step; it is the next start, diagnosed afresh, and the
// module kept in round 1 stays in fp32.
TEST(TuneSearch, ADivergedCandidateThatGotFurtherIsTheNextStart) {
  Fault late = overflow("layer3.0.conv1", 2);
  late.visible_from = 1;
  World w({overflow("conv1"), late}, 4);
  const SearchSpec spec = spec_of({{"amp.opt_level", "O1"}});
  run_search(w, spec, 1);
  ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note << "\n"
                                                            << dump(path_of(w));
  EXPECT_EQ(w.fp32_modules_of_answer(), (std::vector<std::string>{"conv1", "layer3.0.conv1"}));
  const auto path = path_of(w);
  EXPECT_EQ(path[0], "1 search fp32_modules diverged") << "conv1 alone diverges, late";
  EXPECT_EQ(path[1], "2 search fp32_modules within");
  EXPECT_EQ(w.rounds[1].start_run_id, w.candidates[0].run_id)
      << "round 2 starts from round 1's diverged candidate";
  EXPECT_EQ(w.rounds[1].fork_epoch, 1) << "forked where it was last within the band";
}

// Three faults of different kinds at once: a layer that overflows, a static loss scale too high
// and an int32 cast that truncates. The answer fixes all three; the path says why each move was
// made (the advice row it came from).
TEST(TuneSearch, ThreeFaultsOfDifferentKindsAreEachFixedWithTheirReason) {
  World w({overflow("conv1"), static_scale_too_high(), truncating_cast("k_value", 0.5)}, 4);
  const SearchSpec spec = spec_of({{"amp.opt_level", "O1"},
                                   {"amp.loss_scale", 128.0},
                                   {"casts.int32", {"k_value", "cam_param"}}});
  run_search(w, spec, 1);
  ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note << "\n"
                                                            << dump(path_of(w));
  const Config& answer = w.run(w.search->answer_run_id).config;
  EXPECT_EQ(answer.at("amp.loss_scale"), "dynamic");
  EXPECT_EQ(answer.get_string_list("amp.fp32_modules"), (std::vector<std::string>{"conv1"}));
  EXPECT_FALSE(has(answer.get_string_list("casts.int32"), "k_value"));
  EXPECT_EQ(w.search->answer_yaml.find("amp.opt_level: O1"), 0u) << w.search->answer_yaml;
  std::set<records::AdviceRule> explained;
  for (const auto& c : w.candidates) {
    EXPECT_FALSE(c.reason.empty());
    if (c.advice_rule) explained.insert(*c.advice_rule);
  }
  EXPECT_EQ(explained, (std::set<records::AdviceRule>{records::AdviceRule::kActivationOverflow,
                                                      records::AdviceRule::kGradientOverflow,
                                                      records::AdviceRule::kCastPoint}));
}

// Two moves that each get further than the start, neither within: their union is tried before
// the search goes on, and bisection keeps both of its items. (No rung before the end: at a rung
// halving would stop one of the two.)
TEST(TuneSearch, TheUnionOfMovesThatEachHelpedIsTriedAndBisected) {
  World w({overflow("conv1", 1), truncating_cast("k_value", 0.5)}, 4);
  SearchSpec spec = spec_of({{"amp.opt_level", "O1"}, {"casts.int32", {"k_value"}}});
  spec.block.min_epochs = 4;
  run_search(w, spec, 1);
  ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note << "\n"
                                                            << dump(path_of(w));
  const auto path = path_of(w);
  EXPECT_EQ(path[0], "1 search fp32_modules outside");
  EXPECT_EQ(path[1], "1 search casts diverged");
  EXPECT_EQ(path[2], "2 union union within");
  const Config& answer = w.run(w.search->answer_run_id).config;
  EXPECT_EQ(answer.get_string_list("amp.fp32_modules"), (std::vector<std::string>{"conv1"}));
  EXPECT_TRUE(answer.get_string_list("casts.int32").empty());
  int probes = 0;
  for (const auto& c : w.candidates) probes += w.kind_of(c.round) == "bisect";
  EXPECT_EQ(probes, 2) << "each item dropped once, both needed";
}

// A candidate ranks by how far it got: one that diverges late beats one that diverges at once
// (whatever their order), and a failed one is never the next start.
TEST(TuneSearch, ProgressRanksLateDivergenceAboveEarly) {
  const std::map<int, double> ref = {{0, 1.0}, {1, 0.9}, {2, 0.8}, {3, 0.7}};
  Tolerance t{0.1, 0, false};
  RunCurve early{records::RunStatus::kDiverged, {}, false};
  RunCurve late{records::RunStatus::kDiverged, {{0, 1.0}, {1, 0.95}}, false};
  RunCurve close{records::RunStatus::kDiverged, {{0, 1.0}, {1, 0.91}}, false};
  EXPECT_TRUE(further(progress_of(late, ref, 3, t), progress_of(early, ref, 3, t)));
  EXPECT_TRUE(further(progress_of(close, ref, 3, t), progress_of(late, ref, 3, t)));
  EXPECT_FALSE(further(progress_of(late, ref, 3, t), progress_of(late, ref, 3, t)));
  EXPECT_EQ(judge(late, 3, 0.7, t), Outcome::kDiverged);
  RunCurve nan_end{records::RunStatus::kDone, {{0, 1}, {1, 0.9}, {2, 0.8}, {3, kNaN}}, false};
  EXPECT_EQ(judge(nan_end, 3, 0.7, t), Outcome::kDiverged) << "a NaN at the end is a divergence";
  RunCurve streak{records::RunStatus::kDone, {{0, 1}, {1, 0.9}, {2, 0.8}, {3, 0.7}}, true};
  EXPECT_EQ(judge(streak, 3, 0.7, t), Outcome::kDiverged)
      << "an epoch that ends inside a non-finite streak";
}

// Noise at the tolerance edge: a value exactly at the limit is within, a hair past it outside;
// and reference repeats whose seed noise exceeds the tolerance say so in the note.
TEST(TuneSearch, NoiseAtTheToleranceEdge) {
  const Tolerance t{0.1, 0, false};
  EXPECT_TRUE(t.within(0.7 + 0.1, 0.7));
  EXPECT_FALSE(t.within(std::nextafter(0.8, 1.0), 0.7));
  World w({truncating_cast("k_value", 0.05)}, 4);
  w.seed_noise = 0.2;
  SearchSpec spec = spec_of({{"amp.opt_level", "O1"}, {"casts.int32", {"k_value"}}});
  spec.block.reference_repeats = 3;
  run_search(w, spec, 1);
  ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note;
  EXPECT_NE(w.search->note.find("seed noise of the reference 0.4 (range of 3 seeds), above the "
                                "tolerance"),
            std::string::npos)
      << w.search->note;
  EXPECT_EQ(path_of(w)[0], "0 reference seed outside");
  EXPECT_EQ(path_of(w)[1], "0 reference seed outside");
  EXPECT_EQ(w.search->answer_run_id, w.search->start_run_id) << "0.05 worse: within 0.1";
}

// A forked answer is trained again from scratch (tune.confirm) and its metric noted; with
// confirm off it is not.
TEST(TuneSearch, AForkedAnswerIsConfirmedFromScratch) {
  for (const bool confirm : {true, false}) {
    Fault late = overflow("conv1", 2);
    World w({late}, 4);
    SearchSpec spec = spec_of({{"amp.opt_level", "O1"}});
    spec.block.confirm = confirm;
    run_search(w, spec, 1);
    ASSERT_EQ(records::to_string(w.search->status), "answered") << w.search->note << "\n"
                                                              << dump(path_of(w));
    const auto path = path_of(w);
    EXPECT_EQ(path[0], "1 search fp32_modules within");
    EXPECT_NE(w.run(w.candidates[0].run_id).parent, 0) << "the answer is a fork";
    EXPECT_EQ(path.size(), confirm ? 2u : 1u);
    if (confirm) {
      EXPECT_EQ(path[1], "2 confirm confirm within");
      EXPECT_EQ(w.run(w.candidates[1].run_id).parent, 0);
      EXPECT_NE(w.search->note.find("from scratch 0.7 (within)"), std::string::npos)
          << w.search->note;
    }
  }
}

// Stopped after any training step and run again, the search makes the same decisions, trains no
// epoch twice and gives the same answer as one that never stopped.
TEST(TuneSearch, ResumingAfterEveryStepGivesTheSameSearch) {
  auto world = [] {
    return World({overflow("conv1"), static_scale_too_high(), truncating_cast("k_value", 0.5)},
                 4);
  };
  const SearchSpec spec = spec_of({{"amp.opt_level", "O1"},
                                   {"amp.loss_scale", 128.0},
                                   {"casts.int32", {"k_value"}}});
  World whole = world();
  run_search(whole, spec, 1);
  ASSERT_EQ(records::to_string(whole.search->status), "answered");
  ASSERT_GT(whole.trainings, 3);
  for (int k = 0; k < whole.trainings; ++k) {
    World w = world();
    w.stop_after_trainings = k;
    EXPECT_TRUE(run_search(w, spec, 1).stopped) << k;
    w.stop_after_trainings = -1;
    EXPECT_FALSE(run_search(w, spec, 1).stopped) << k;
    EXPECT_EQ(w.search->answer_run_id, whole.search->answer_run_id) << k;
    EXPECT_EQ(path_of(w), path_of(whole)) << k;
    EXPECT_EQ(w.search->epochs_spent, whole.search->epochs_spent) << k;
    EXPECT_EQ(w.trained_epochs, whole.trained_epochs)
        << "an epoch trained twice, or one more or less, after stopping at " << k;
  }
}

}  // namespace
}  // namespace amptune::app
