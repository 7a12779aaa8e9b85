// The rules of amptune tune (app/tune/tune_rules.h) on hand-made configs and advice: the tolerance
// band, the moves and their order, the rungs, the bisection, the objective and the answer's YAML,
// the union of moves, and one outcome per curve whatever its epoch length.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "app/tune/tune_rules.h"
#include "unit/app/tune_moves.h"
#include "train/divergence.h"

namespace amptune::app {
namespace {

using records::AdviceRule;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Config config(const Overrides& overrides) {
  Config c;
  for (const auto& [key, value] : overrides) c.set(key, value);
  return c;
}

const std::vector<TuneMoveKind> kAll = {
    TuneMoveKind::kLossScale, TuneMoveKind::kKeepBatchnormFp32, TuneMoveKind::kFp32Modules,
    TuneMoveKind::kCasts,     TuneMoveKind::kOptLevel,          TuneMoveKind::kLrDecEpoch};

TEST(AppTune, ToleranceBandInBothDirections) {
  const Tolerance acc{5.0, 0, true};
  EXPECT_EQ(acc.limit(70), 65);
  EXPECT_TRUE(acc.within(65, 70));
  EXPECT_TRUE(acc.within(90, 70));  // better than the reference
  EXPECT_FALSE(acc.within(64.9, 70));
  EXPECT_FALSE(acc.within(kNaN, 70));
  EXPECT_FALSE(acc.within(70, kNaN));
  EXPECT_EQ(acc.shortfall(60, 70), 10);
  EXPECT_TRUE(std::isinf(acc.shortfall(kNaN, 70)));
  const Tolerance mrpe{0, 0.1, false};  // 10 % worse at most, lower is better
  EXPECT_DOUBLE_EQ(mrpe.limit(120), 132);
  EXPECT_TRUE(mrpe.within(131, 120));
  EXPECT_FALSE(mrpe.within(133, 120));
  EXPECT_EQ(mrpe.shortfall(100, 120), -20);
  const std::map<int, double> ref = {{0, 50}, {1, 60}, {2, 70}};
  EXPECT_EQ(exit_epoch({{0, 49}, {1, 50}, {2, 70}}, ref, 2, acc), 1);
  EXPECT_EQ(exit_epoch({{0, kNaN}}, ref, 2, acc), 0);
  EXPECT_FALSE(exit_epoch({{0, 48}, {1, 58}, {2, 66}, {7, 0}}, ref, 2, acc));  // 7: past the end
}

TEST(AppTune, ADiagnosedOverflowUnderO1KeepsTheModuleInFp32) {
  const Config c = config({{"amp.opt_level", "O1"}, {"amp.loss_scale", "dynamic"}});
  const std::vector<records::DiagnosisAdvice> advice = {
      {AdviceRule::kActivationOverflow, "conv1", "..."},
      {AdviceRule::kFirstDeparture, "conv1", "..."}};
  const auto moves = candidate_moves(c, advice, kAll, 0, false);
  EXPECT_EQ(describe(moves), (std::vector<std::string>{"fp32_modules amp.fp32_modules=[conv1]"}))
      << "the same change twice is one candidate; O1 has no cheaper move left";
  EXPECT_EQ(moves[0].advice_rule, AdviceRule::kActivationOverflow);
  EXPECT_EQ(moves[0].advice_module, "conv1");
  EXPECT_TRUE(
      candidate_moves(c, advice, {TuneMoveKind::kLossScale, TuneMoveKind::kOptLevel}, 0, false)
          .empty());
}

// The seed's port: O2, static 128, int32 casts. The advice comes first, in its order (under O2 an
// overflowing module's enclosing block), then the move order, cheapest first.
TEST(AppTune, TheSeedPortGetsAdviceMovesThenTheMoveOrder) {
  const Config c = config({{"amp.opt_level", "O2"},
                           {"amp.loss_scale", 128.0},
                           {"casts.int32", {"k_value", "cam_param"}},
                           {"schedule.epochs", 6},
                           {"schedule.lr_dec_epoch", {2, 5}}});
  const std::vector<records::DiagnosisAdvice> advice = {
      {AdviceRule::kActivationOverflow, "layer1.0.conv1", ""},
      {AdviceRule::kGradientUnderflow, "fc.weight", ""},
      {AdviceRule::kCastPoint, "k_value", ""},
      {AdviceRule::kBatchnormLowPrecision, "bn1", ""}};  // BatchNorm is fp32 under O2: not a move
  EXPECT_EQ(describe(candidate_moves(c, advice, kAll, 1, false)),
            (std::vector<std::string>{
                "fp32_modules amp.fp32_modules=[layer1.0]",
                "loss_scale amp.loss_scale=dynamic",
                "casts casts.int32=[cam_param]",
                "casts casts.int32=[]",
                "lr_dec_epoch schedule.lr_dec_epoch=[3, 5]",
                "opt_level amp.opt_level=O1",
            }));
  // To O1, the keys apex refuses with O1 go back to auto (amp::opt_level_change).
  const Config kept_bn = config({{"amp.opt_level", "O2"}, {"amp.keep_batchnorm_fp32", "false"}});
  EXPECT_EQ(describe(candidate_moves(kept_bn, {}, {TuneMoveKind::kOptLevel}, 1, false)),
            (std::vector<std::string>{"opt_level amp.opt_level=O1 amp.keep_batchnorm_fp32=auto"}));
  // lr_dec_epoch once per path; no decay after the fork epoch: no move.
  EXPECT_EQ(describe(candidate_moves(c, {}, {TuneMoveKind::kLrDecEpoch}, 1, true)).size(), 0u);
  EXPECT_EQ(describe(candidate_moves(c, {}, {TuneMoveKind::kLrDecEpoch}, 4, false)).size(), 0u);
  // O3: its auto scale is static 1.0, BatchNorm is low precision.
  const Config o3 = config({{"amp.opt_level", "O3"}});
  EXPECT_EQ(describe(candidate_moves(o3, {{AdviceRule::kBatchnormLowPrecision, "bn1", ""}}, kAll, 0,
                                     false)),
            (std::vector<std::string>{"keep_batchnorm_fp32 amp.keep_batchnorm_fp32=\"true\"",
                                      "loss_scale amp.loss_scale=dynamic",
                                      "opt_level amp.opt_level=O2"}));
}

TEST(AppTune, RungsStandMinEpochsTimesEtaPowersPastTheFork) {
  EXPECT_EQ(tune_rungs(-1, 2, 3, 1), (std::vector<int>{0, 2}));
  EXPECT_EQ(tune_rungs(0, 8, 3, 1), (std::vector<int>{1, 3, 8}));
  EXPECT_EQ(tune_rungs(0, 8, 2, 2), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(tune_rungs(5, 6, 3, 1), (std::vector<int>{6}));
}

// Runs the bisection against `needed`: a probe stays within tolerance when it keeps them all.
std::vector<std::string> bisect_with(const std::vector<std::string>& modules,
                                     const std::set<std::string>& needed, int* probes_made) {
  std::vector<std::pair<std::vector<std::string>, bool>> probes;
  std::vector<std::string> kept;
  while (auto chunk = next_bisect_probe(modules, probes, kept)) {
    std::set<std::string> left(kept.begin(), kept.end());
    for (const auto& m : *chunk) left.erase(m);
    bool within = true;
    for (const auto& m : needed) within = within && left.count(m);
    probes.emplace_back(*chunk, within);
  }
  *probes_made = static_cast<int>(probes.size());
  return kept;
}

TEST(AppTune, BisectionKeepsTheModulesThatMatter) {
  int probes = 0;
  EXPECT_EQ(bisect_with({"conv1", "layer1", "layer2", "fc"}, {"conv1"}, &probes),
            (std::vector<std::string>{"conv1"}));
  EXPECT_EQ(probes, 4);  // [conv1 layer1] out, [conv1] out, [layer1] in, [layer2 fc] in
  EXPECT_EQ(bisect_with({"a", "b", "c", "d", "e"}, {"b", "e"}, &probes),
            (std::vector<std::string>{"b", "e"}));
  EXPECT_EQ(bisect_with({"a", "b"}, {}, &probes), (std::vector<std::string>{}));
  EXPECT_EQ(bisect_with({"a"}, {"a"}, &probes), (std::vector<std::string>{"a"}));
  EXPECT_EQ(probes, 0);  // one module: nothing to bisect
}

// A list that repeats a module (10,000 copies of conv1 took 19,998 probe runs): each distinct
// module is bisected once, so the probes stay below 2 x (distinct modules).
TEST(AppTune, BisectionCountsEachModuleOnce) {
  int probes = 0;
  const std::vector<std::string> copies(10000, "conv1");
  EXPECT_EQ(bisect_with(copies, {"conv1"}, &probes), (std::vector<std::string>{"conv1"}));
  EXPECT_EQ(probes, 0);
  std::vector<std::string> mixed;
  for (int i = 0; i < 5000; ++i) mixed.insert(mixed.end(), {"conv1", "fc", "layer1"});
  EXPECT_EQ(bisect_with(mixed, {"fc"}, &probes), (std::vector<std::string>{"fc"}));
  EXPECT_LE(probes, 5);
}

TEST(AppTune, PrecisionRankPutsLessFp32WorkFirst) {
  // Equal measured shares: the opt level, then the modules, then BatchNorm decide.
  const auto o2 = precision_rank(config({{"amp.opt_level", "O2"}}), 0.0);
  const auto o2_bn_low =
      precision_rank(config({{"amp.opt_level", "O2"}, {"amp.keep_batchnorm_fp32", "false"}}), 0.0);
  const auto o1 = precision_rank(config({{"amp.opt_level", "O1"}}), 0.0);
  const auto o1_conv1 =
      precision_rank(config({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1"}}}), 0.0);
  const auto o0 = precision_rank(config({}), 1.0);
  EXPECT_LT(o2_bn_low, o2);
  EXPECT_LT(o2, o1);
  EXPECT_LT(o1, o1_conv1);
  EXPECT_LT(o1_conv1, o0);
  // The measured share comes first: two small modules in fp32 before one large one, O1 with
  // less fp32 work before O2 with more.
  const auto two_small = precision_rank(
      config({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1", "fc"}}}), 0.01);
  const auto one_large =
      precision_rank(config({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"layer1"}}}), 0.25);
  const auto o2_large =
      precision_rank(config({{"amp.opt_level", "O2"}, {"amp.fp32_modules", {"layer1"}}}), 0.25);
  EXPECT_LT(two_small, one_large);
  EXPECT_LT(o2_large, one_large);
  EXPECT_LT(two_small, o2_large);
  // Not measured (NaN): ranked as all of it in fp32, behind every measured share, before O0.
  const auto unknown =
      precision_rank(config({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1"}}}), kNaN);
  EXPECT_LT(one_large, unknown);
  EXPECT_LT(unknown, o0);
}

TEST(AppTune, TheAnswerIsYamlOfTheChangedKeys) {
  EXPECT_EQ(flow_yaml("dynamic"), "dynamic");
  EXPECT_EQ(flow_yaml("true"), "\"true\"");
  EXPECT_EQ(flow_yaml("a b"), "\"a b\"");
  EXPECT_EQ(flow_yaml(nlohmann::json{"conv1", "layer4.*"}), "[conv1, layer4.*]");
  EXPECT_EQ(flow_yaml(128.0), "128.0");
  const Config base = config({{"amp.loss_scale", "dynamic"}});
  const Config answer = config(
      {{"amp.loss_scale", "dynamic"}, {"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1"}}});
  EXPECT_EQ(changed_yaml(answer, base,
                         {"amp.opt_level", "amp.loss_scale", "amp.fp32_modules", "amp.opt_level"}),
            "amp.opt_level: O1\namp.fp32_modules: [conv1]\n");
}

TEST(AppTune, TheGridOfTriedMovesCountsEachDistinctChange) {
  std::vector<records::TuneCandidateRow> rows(3);
  rows[0].move = TuneMoveKind::kLossScale;
  rows[0].change_json = R"({"amp.loss_scale":"dynamic"})";
  rows[1] = rows[0];  // the same change in a later round: one value of the axis
  rows[2].move = TuneMoveKind::kFp32Modules;
  rows[2].change_json = R"({"amp.fp32_modules":["conv1"]})";
  EXPECT_EQ(grid_epochs(rows, 3), (2 * 2 + 1) * 3);  // 4 cells and the reference
  EXPECT_EQ(grid_epochs({}, 3), 2 * 3);
  // Two modules named by fp32_modules moves: the four subsets of {conv1, layer3}.
  rows.push_back(rows[2]);
  rows[3].change_json = R"({"amp.fp32_modules":["conv1","layer3"]})";
  EXPECT_EQ(grid_epochs(rows, 3), (2 * 4 + 1) * 3);
}

}  // namespace
}  // namespace amptune::app

namespace amptune::app {
namespace {

// The diagnosis names two modules that overflow with finite input: both together, then each
// alone (docs/TUNE.md step 5).
TEST(AppTune, SeveralOverflowsAreAlsoOfferedTogether) {
  const Config c = config({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"fc"}}});
  const std::vector<records::DiagnosisAdvice> advice = {
      {AdviceRule::kActivationOverflow, "conv1", ""},
      {AdviceRule::kActivationOverflow, "layer3.0.conv1", ""},
      {AdviceRule::kFirstDeparture, "layer2.0.conv2", ""}};
  const auto moves = candidate_moves(c, advice, {TuneMoveKind::kFp32Modules}, 0, false);
  EXPECT_EQ(describe(moves), (std::vector<std::string>{
                                 "fp32_modules amp.fp32_modules=[fc, conv1, layer3.0.conv1]",
                                 "fp32_modules amp.fp32_modules=[fc, conv1]",
                                 "fp32_modules amp.fp32_modules=[fc, layer3.0.conv1]",
                                 "fp32_modules amp.fp32_modules=[fc, layer2.0.conv2]",
                             }));
  EXPECT_EQ(moves[0].advice_module, "conv1,layer3.0.conv1");
  // One overflow: nothing to put together.
  EXPECT_EQ(candidate_moves(c, {advice[0]}, {TuneMoveKind::kFp32Modules}, 0, false).size(), 1u);
}

// The union of moves: fp32 modules added together, cast points removed together, other keys as
// the first move sets them.
TEST(AppTune, TheUnionOfMovesAppliesEachOfThem) {
  const Config c = config({{"amp.opt_level", "O2"},
                           {"amp.loss_scale", 128.0},
                           {"casts.int32", {"k_value", "cam_param"}}});
  const std::vector<TuneMove> moves = {
      {TuneMoveKind::kFp32Modules, {{"amp.fp32_modules", {"conv1"}}}, "", std::nullopt, ""},
      {TuneMoveKind::kCasts, {{"casts.int32", {"cam_param"}}}, "", std::nullopt, ""},
      {TuneMoveKind::kFp32Modules, {{"amp.fp32_modules", {"layer3"}}}, "", std::nullopt, ""},
      {TuneMoveKind::kLossScale, {{"amp.loss_scale", "dynamic"}}, "", std::nullopt, ""},
      {TuneMoveKind::kCasts, {{"casts.int32", {"k_value"}}}, "", std::nullopt, ""}};
  const Overrides u = union_change(c, moves);
  const Config applied = [&] {
    Config out = c;
    for (const auto& [key, value] : u) out.set(key, value);
    return out;
  }();
  EXPECT_EQ(applied.get_string_list("amp.fp32_modules"),
            (std::vector<std::string>{"conv1", "layer3"}));
  EXPECT_TRUE(applied.get_string_list("casts.int32").empty());
  EXPECT_EQ(applied.at("amp.loss_scale"), "dynamic");
  EXPECT_EQ(applied.get_string("amp.opt_level"), "O2");
}

// The epoch a run leaves the band: outside, or without a value (it diverged there).
TEST(AppTune, ARunLeavesTheBandWhereItHasNoValue) {
  const Tolerance t{0.1, 0, false};
  const std::map<int, double> ref = {{0, 1.0}, {1, 0.9}, {2, 0.8}};
  EXPECT_FALSE(exit_epoch({{0, 1.0}, {1, 0.9}, {2, 0.85}}, ref, 2, t));
  EXPECT_EQ(exit_epoch({{0, 1.0}}, ref, 2, t), 1);
  EXPECT_EQ(exit_epoch({}, ref, 2, t), 0);
  EXPECT_EQ(exit_epoch({{0, 1.0}, {1, 1.2}}, ref, 2, t), 1);
  for (const Outcome o : {Outcome::kPending, Outcome::kWithin, Outcome::kOutside, Outcome::kPruned,
                          Outcome::kDiverged, Outcome::kFailed}) {
    EXPECT_EQ(records::parse_outcome(records::to_string(o)), o);
  }
  EXPECT_FALSE(records::parse_outcome("Within"));
}

}  // namespace
}  // namespace amptune::app


namespace amptune::app {
namespace {

// What the database holds of a run trained on `losses` (one per step) in epochs of
// `epoch_steps`, stopped and continued at every epoch boundary (as tune's rungs do): the trainer's
// divergence rule over the steps, each epoch's train_loss (the mean of its finite losses) and
// whether the last recorded epoch ends inside a non-finite streak.
RunCurve curve_of(const std::vector<double>& losses, int epoch_steps, bool static_scale) {
  RunCurve curve;
  curve.status = records::RunStatus::kDone;
  int64_t streak = 0;  // carried from epoch to epoch as a resume restores it
  for (size_t first = 0, epoch = 0; first < losses.size(); first += epoch_steps, ++epoch) {
    train::DivergenceWatch watch(streak);
    double sum = 0;
    int finite = 0;
    for (size_t s = first; s < first + static_cast<size_t>(epoch_steps); ++s) {
      if (!watch.observe(losses[s], static_scale).empty()) {
        curve.status = records::RunStatus::kDiverged;  // the epoch is not recorded
        return curve;
      }
      if (std::isfinite(losses[s])) {
        sum += losses[s];
        ++finite;
      }
    }
    curve.values[static_cast<int>(epoch)] = finite ? sum / finite : kNaN;
    streak = watch.streak();
    curve.ends_non_finite = streak > 0;
  }
  return curve;
}

// One scripted loss curve of 600 steps grouped as 30 epochs of 20 steps and as 3 of 200 gets the
// same outcome (docs/TUNE.md "One outcome per curve"): a loss that turns NaN for good diverges
// whether the streak reaches the trainer's 100 or not; a burst that recovers does not.
TEST(TuneRules, OneCurveGetsOneOutcomeWhateverItsEpochLength) {
  const Tolerance t{0.1, 0, false};
  auto curve = [](auto loss_at) {
    std::vector<double> losses(600);
    for (size_t s = 0; s < losses.size(); ++s) losses[s] = loss_at(static_cast<int>(s));
    return losses;
  };
  const std::map<std::string, std::pair<std::vector<double>, Outcome>> cases = {
      {"clean", {curve([](int) { return 0.5; }), Outcome::kWithin}},
      {"worse", {curve([](int) { return 0.7; }), Outcome::kOutside}},
      {"NaN for the last 50 steps",
       {curve([](int s) { return s >= 550 ? kNaN : 0.5; }), Outcome::kDiverged}},
      {"NaN from step 100", {curve([](int s) { return s >= 100 ? kNaN : 0.5; }), Outcome::kDiverged}},
      {"a burst of 60 NaN that recovers",
       {curve([](int s) { return s >= 230 && s < 290 ? kNaN : 0.5; }), Outcome::kWithin}},
  };
  for (const auto& [name, c] : cases) {
    for (const bool static_scale : {false, true}) {
      const Outcome want = static_scale && name != "clean" && name != "worse"
                               ? Outcome::kDiverged  // a static scale diverges at the first NaN
                               : c.second;
      const RunCurve short_epochs = curve_of(c.first, 20, static_scale);
      const RunCurve long_epochs = curve_of(c.first, 200, static_scale);
      EXPECT_EQ(judge(short_epochs, 29, 0.5, t), want) << name << " in 20-step epochs";
      EXPECT_EQ(judge(long_epochs, 2, 0.5, t), want) << name << " in 200-step epochs";
    }
  }
}

}  // namespace
}  // namespace amptune::app
