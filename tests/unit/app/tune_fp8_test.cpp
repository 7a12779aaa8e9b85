// The FP8 rules of amptune tune (app/tune/tune_rules.h; docs/TUNE.md "FP8") on hand-made configs
// and advice: the moves the FP8 advice names and the recipe keys of the move order, none without
// FP8, the union of modules kept out of FP8, their bisection, the grid they span, and the
// objective's ranking of FP8 work.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "app/tune/tune_rules.h"
#include "unit/app/tune_moves.h"

namespace amptune::app {
namespace {

using records::AdviceRule;

Config config(const Overrides& overrides) {
  Config c;
  c.set("amp.opt_level", "O1");
  c.set("amp.dtype", "bf16");
  for (const auto& [key, value] : overrides) c.set(key, value);
  return c;
}

const std::vector<TuneMoveKind> kFp8Moves = {TuneMoveKind::kFp8SkipModules,
                                             TuneMoveKind::kFp8Recipe, TuneMoveKind::kFp8Margin,
                                             TuneMoveKind::kFp8History, TuneMoveKind::kOptLevel,
                                             TuneMoveKind::kFp32Modules};

const std::vector<records::DiagnosisAdvice> kAdvice = {
    {AdviceRule::kFp8KeepOut, "fc", "head"},
    {AdviceRule::kFp8CurrentScaling, "layer3.0.conv1", "jump"},
    {AdviceRule::kFp8RaiseMargin, "layer1.0.conv2", "mild"},
    {AdviceRule::kFp8ShortenHistory, "layer2.0.conv1", "stale"},
    {AdviceRule::kFp8KeepOut, "layer2.0.conv1", "underflow"}};

TEST(AppTuneFp8, AdviceMovesThenTheRecipeKeys) {
  const Config c = config({{"amp.fp8.enabled", true}});
  const auto moves = candidate_moves(c, kAdvice, kFp8Moves, 0, false);
  EXPECT_EQ(describe(moves), (std::vector<std::string>{
                                 "fp8_skip_modules amp.fp8.skip_modules=[fc]",
                                 "fp8_recipe amp.fp8.recipe=current",
                                 "fp8_margin amp.fp8.margin=1",
                                 "fp8_history amp.fp8.amax_history_len=64",
                                 "fp8_skip_modules amp.fp8.skip_modules=[layer2.0.conv1]",
                             }));
  EXPECT_EQ(moves[1].advice_rule, AdviceRule::kFp8CurrentScaling);
  EXPECT_EQ(moves[1].advice_module, "layer3.0.conv1");
  EXPECT_EQ(moves[4].advice_module, "layer2.0.conv1");
  // Without advice the move order offers the recipe keys (no module: no fp8_skip_modules).
  const auto order = candidate_moves(c, {}, kFp8Moves, 0, false);
  EXPECT_EQ(describe(order), (std::vector<std::string>{"fp8_recipe amp.fp8.recipe=current",
                                                       "fp8_margin amp.fp8.margin=1",
                                                       "fp8_history amp.fp8.amax_history_len=64"}));
  EXPECT_FALSE(order[0].advice_rule);
  // Only the moves tune.moves allows.
  EXPECT_EQ(describe(candidate_moves(c, kAdvice, {TuneMoveKind::kFp8SkipModules}, 0, false)),
            (std::vector<std::string>{"fp8_skip_modules amp.fp8.skip_modules=[fc]",
                                      "fp8_skip_modules amp.fp8.skip_modules=[layer2.0.conv1]"}));
}

TEST(AppTuneFp8, NoFp8MoveWhereItChangesNothing) {
  // FP8 off: its advice and recipe keys change nothing.
  EXPECT_TRUE(candidate_moves(config({}), kAdvice, kFp8Moves, 0, false).empty());
  // Current scaling: no recipe move, no history (a delayed recipe's); the margin still.
  const Config current = config({{"amp.fp8.enabled", true},
                                 {"amp.fp8.recipe", "current"},
                                 {"amp.fp8.skip_modules", {"fc"}},
                                 {"amp.fp8.amax_history_len", 1}});
  EXPECT_EQ(describe(candidate_moves(current, kAdvice, kFp8Moves, 0, false)),
            (std::vector<std::string>{
                "fp8_margin amp.fp8.margin=1",
                "fp8_skip_modules amp.fp8.skip_modules=[fc, layer2.0.conv1]"}));
  // A history of 1 cannot be shorter; one of 8 becomes 1.
  const Config short_history =
      config({{"amp.fp8.enabled", true}, {"amp.fp8.amax_history_len", 8}});
  EXPECT_EQ(describe(candidate_moves(short_history, {}, {TuneMoveKind::kFp8History}, 0, false)),
            (std::vector<std::string>{"fp8_history amp.fp8.amax_history_len=1"}));
}

TEST(AppTuneFp8, TheUnionJoinsTheModulesKeptOutOfFp8AndBisectionSplitsThem) {
  const Config c = config({{"amp.fp8.enabled", true}});
  const auto moves = candidate_moves(c, kAdvice, kFp8Moves, 0, false);
  const Overrides u = union_change(c, {moves[0], moves[1], moves[4]});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].first, "amp.fp8.recipe");
  EXPECT_EQ(u[1].first, "amp.fp8.skip_modules");
  EXPECT_EQ(flow_yaml(u[1].second), "[fc, layer2.0.conv1]");
  EXPECT_TRUE(is_module_list("amp.fp8.skip_modules"));
  EXPECT_FALSE(is_module_list("amp.fp8.recipe"));

  const Config solution = with(c, {{"amp.fp32_modules", {"conv1"}},
                                   {"amp.fp8.skip_modules", {"fc", "layer2.0.conv1"}}});
  const auto items = module_items(solution);
  EXPECT_EQ(items, (std::vector<std::string>{"conv1", "fp8:fc", "fp8:layer2.0.conv1"}));
  const Overrides probe = module_probe(solution, items, {"fp8:fc"});
  ASSERT_EQ(probe.size(), 2u);
  EXPECT_EQ(flow_yaml(probe[0].second), "[conv1]");
  EXPECT_EQ(flow_yaml(probe[1].second), "[layer2.0.conv1]");
  EXPECT_EQ(bisect_move({"fp8:fc"}, items), TuneMoveKind::kFp8SkipModules);
  EXPECT_EQ(bisect_move({"conv1", "fp8:fc"}, items), TuneMoveKind::kFp32Modules);
  EXPECT_EQ(bisect_move({"amp.fp8.recipe: current"}, items), TuneMoveKind::kUndo);
  // Without FP8 its list is no item and no key of a probe.
  const Config off = with(solution, {{"amp.fp8.enabled", false}});
  EXPECT_EQ(module_items(off), (std::vector<std::string>{"conv1"}));
  EXPECT_EQ(module_probe(off, {"conv1"}, {}).size(), 1u);
  // The bisection itself over such items (tune_rules' next_bisect_probe).
  std::vector<std::string> kept;
  const auto first = next_bisect_probe(items, {}, kept);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, (std::vector<std::string>{"conv1", "fp8:fc"}));
}

TEST(AppTuneFp8, TheGridCountsEverySubsetOfTheModulesKeptOutOfFp8) {
  std::vector<records::TuneCandidateRow> tried(3);
  tried[0].move = TuneMoveKind::kFp8SkipModules;
  tried[0].change_json = R"({"amp.fp8.skip_modules": ["fc"]})";
  tried[1].move = TuneMoveKind::kFp8SkipModules;
  tried[1].change_json = R"({"amp.fp8.skip_modules": ["layer2.0.conv1"]})";
  tried[2].move = TuneMoveKind::kFp8Recipe;
  tried[2].change_json = R"({"amp.fp8.recipe": "current"})";
  // (2^2 subsets x 2 recipes + the reference) x 3 epochs.
  EXPECT_EQ(grid_epochs(tried, 3), (4 * 2 + 1) * 3);
}

TEST(AppTuneFp8, FewerModulesOutOfFp8IsLowerPrecision) {
  const Config one = config({{"amp.fp8.enabled", true}, {"amp.fp8.skip_modules", {"fc"}}});
  const Config two =
      config({{"amp.fp8.enabled", true}, {"amp.fp8.skip_modules", {"fc", "conv1"}}});
  const Config bf16 = config({});
  // The measured FP8 share decides after the fp32 share.
  EXPECT_LT(precision_rank(two, 0.0, 0.9), precision_rank(one, 0.0, 0.8));
  EXPECT_LT(precision_rank(one, 0.0, 0.8), precision_rank(bf16, 0.0, 0.0));
  EXPECT_LT(precision_rank(bf16, 0.0, 0.0), precision_rank(one, 0.1, 0.8));  // fp32 work first
  // Equal shares (or none measured): the count of modules kept out of FP8.
  EXPECT_LT(precision_rank(one, 0.0, 0.5), precision_rank(two, 0.0, 0.5));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_LT(precision_rank(one, 0.0, nan), precision_rank(two, 0.0, nan));
  EXPECT_LT(precision_rank(two, 0.0, 0.01), precision_rank(one, 0.0, nan));
}

}  // namespace
}  // namespace amptune::app
