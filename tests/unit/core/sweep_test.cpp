// Sweep expansion: grid / zip / exclude / repeat counts and order, --set, --only, hashes.
#include "core/sweep.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/scratch.h"

namespace amptune {
namespace {

std::vector<std::string> labels(const std::vector<Cell>& cells) {
  std::vector<std::string> out;
  for (const auto& c : cells) out.push_back(c.label());
  return out;
}

TEST(CoreSweep, NameOnlyIsOneBaseCellAtTheDefaults) {
  const Sweep sweep = parse_sweep("name: plain\n", "<string>");
  EXPECT_EQ(sweep.name, "plain");
  EXPECT_EQ(sweep.source_path, "<string>");
  ASSERT_EQ(sweep.cells.size(), 1u);
  EXPECT_EQ(sweep.cells[0].label(), "base");
  EXPECT_TRUE(sweep.cells[0].axes.empty());
  EXPECT_TRUE(sweep.axis_keys.empty());
  EXPECT_EQ(sweep.cells[0].hash, Config().hash());
  EXPECT_EQ(sweep.cells[0].hash, sweep.cells[0].config().hash());
}

// Paths of data are not in a cell's config hash (their contents enter the run's identity when
// the data are read), yet a grid over them has one cell per path, not a duplicate.
// Every key of schemas/sweep.yaml's prune: block is read, nested or dotted, and the defaults are
// the schema's when the block leaves a key out.
TEST(CoreSweep, ThePruneBlockReadsEveryKeyOfItsSchema) {
  std::vector<std::string> keys;
  for (const KeySpec& spec : Schema::sweep_blocks().keys()) {
    if (spec.key.rfind("prune.", 0) == 0) keys.push_back(spec.key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"prune.rule", "prune.metric", "prune.grace_epochs",
                                            "prune.eta", "prune.min_cells"}))
      << "a new key of schemas/sweep.yaml needs its field in PruneBlock and read_prune";
  const Sweep set = parse_sweep(
      "name: p\nprune:\n  rule: median\n  metric: val_loss\n  grace_epochs: 2\n  eta: 4\n"
      "  min_cells: 5\n",
      "<string>");
  ASSERT_TRUE(set.prune);
  EXPECT_EQ(set.prune->rule, PruneRule::kMedian);
  EXPECT_EQ(set.prune->metric, "val_loss");
  EXPECT_EQ(set.prune->grace_epochs, 2);
  EXPECT_EQ(set.prune->eta, 4);
  EXPECT_EQ(set.prune->min_cells, 5);
  EXPECT_EQ(set.prune->metric_loc.line, 4);
  const Sweep defaults = parse_sweep("name: p\nprune: {rule: asha}\n", "<string>");
  ASSERT_TRUE(defaults.prune);
  EXPECT_EQ(defaults.prune->metric, "");
  EXPECT_EQ(defaults.prune->grace_epochs, 1);
  EXPECT_EQ(defaults.prune->eta, 3);
  EXPECT_EQ(defaults.prune->min_cells, 3);
  EXPECT_FALSE(parse_sweep("name: p\n", "<string>").prune);
}

TEST(CoreSweep, TheTuneBlockReadsEveryKeyOfItsSchema) {
  std::vector<std::string> keys;
  for (const KeySpec& spec : Schema::sweep_blocks().keys()) {
    if (spec.key.rfind("tune.", 0) == 0) keys.push_back(spec.key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"tune.metric", "tune.tolerance.abs",
                                            "tune.tolerance.rel", "tune.moves", "tune.fork_from",
                                            "tune.budget.epochs", "tune.halving.eta",
                                            "tune.halving.min_epochs", "tune.objective",
                                            "tune.diagnose.batches", "tune.diagnose.cosine_min",
                                            "tune.confirm", "tune.reference_repeats"}))
      << "a new key of schemas/sweep.yaml needs its field in TuneBlock and read_tune";
  const Sweep set = parse_sweep(
      "name: t\nbase: {schedule.epochs: 4}\ntune:\n  metric: mrpe\n  tolerance: {rel: 0.02}\n"
      "  reference: {amp.opt_level: O0}\n"
      "  start:\n    amp: {opt_level: O2, loss_scale: 128}\n    casts.int32: [k_value]\n"
      "  moves: [loss_scale, casts]\n  fork_from: 2\n  budget: {epochs: 40}\n"
      "  halving: {eta: 2, min_epochs: 3}\n  objective: speed\n"
      "  diagnose: {batches: 3, cosine_min: 0.9}\n",
      "<string>");
  ASSERT_TRUE(set.tune);
  const TuneBlock& t = *set.tune;
  EXPECT_EQ(t.metric, "mrpe");
  EXPECT_EQ(t.metric_loc.line, 4);
  EXPECT_EQ(t.tolerance_rel, 0.02);
  EXPECT_EQ(t.tolerance_abs, 0);
  ASSERT_EQ(t.reference.size(), 1u);
  EXPECT_EQ(t.reference[0], (std::pair<std::string, nlohmann::json>{"amp.opt_level", "O0"}));
  ASSERT_EQ(t.start.size(), 3u);
  EXPECT_EQ(t.start[1].first, "amp.loss_scale");
  EXPECT_EQ(t.start[1].second, 128.0);
  EXPECT_EQ(t.start[2].second, (nlohmann::json{"k_value"}));
  EXPECT_EQ(t.moves, (std::vector<TuneMoveKind>{TuneMoveKind::kLossScale, TuneMoveKind::kCasts}));
  EXPECT_EQ(t.fork_from, 2);
  EXPECT_EQ(t.budget_epochs, 40);
  EXPECT_EQ(t.budget_loc.line, 12);
  EXPECT_EQ(t.eta, 2);
  EXPECT_EQ(t.min_epochs, 3);
  EXPECT_EQ(t.objective, Objective::kSpeed);
  EXPECT_EQ(t.diagnose_batches, 3);
  EXPECT_EQ(t.cosine_min, 0.9);
  // Defaults; the canonical block names every key, so a changed default is another search.
  const Sweep defaults = parse_sweep(
      "name: t\ntune: {tolerance: {abs: 1}, reference: {amp.opt_level: O0}, start: {}}\n",
      "<string>");
  ASSERT_TRUE(defaults.tune);
  EXPECT_FALSE(defaults.tune->fork_from);
  EXPECT_EQ(defaults.tune->moves,
            (std::vector<TuneMoveKind>{TuneMoveKind::kLossScale, TuneMoveKind::kCasts,
                                       TuneMoveKind::kKeepBatchnormFp32, TuneMoveKind::kFp32Modules,
                                       TuneMoveKind::kOptLevel}));
  EXPECT_EQ(defaults.tune->budget_epochs, 0);
  EXPECT_EQ(defaults.tune->objective, Objective::kPrecision);
  EXPECT_TRUE(defaults.tune->start.empty());
  const auto canonical = nlohmann::json::parse(defaults.tune->canonical);
  EXPECT_EQ(canonical.at("tune.halving.eta"), 3);
  EXPECT_EQ(canonical.at("reference").at("amp.opt_level"), "O0");
  EXPECT_NE(canonical, nlohmann::json::parse(set.tune->canonical));
  EXPECT_FALSE(parse_sweep("name: p\n", "<string>").tune);
}

// The tune block's words (core/tune_words.h): each value's word reads back to it, the words
// are distinct, an unknown word or another case is unset; only the first ten moves may be
// allowed by tune.moves (the rest are the search's own candidates).
TEST(CoreSweep, TuneWordsRoundTripAndRefuseUnknownWords) {
  const std::vector<TuneMoveKind> moves = {
      TuneMoveKind::kLossScale,   TuneMoveKind::kKeepBatchnormFp32,
      TuneMoveKind::kFp32Modules, TuneMoveKind::kCasts,
      TuneMoveKind::kOptLevel,    TuneMoveKind::kLrDecEpoch,
      TuneMoveKind::kFp8SkipModules, TuneMoveKind::kFp8Recipe,
      TuneMoveKind::kFp8Margin,   TuneMoveKind::kFp8History,
      TuneMoveKind::kUnion,       TuneMoveKind::kUndo,
      TuneMoveKind::kConfirm,     TuneMoveKind::kSeed};
  std::set<std::string> words;
  std::vector<std::string> allowable;
  for (const TuneMoveKind m : moves) {
    EXPECT_EQ(parse_tune_move_kind(to_string(m)), m) << to_string(m);
    words.insert(to_string(m));
    if (is_allowable(m)) allowable.push_back(to_string(m));
  }
  EXPECT_EQ(words.size(), moves.size());
  EXPECT_EQ(allowable,
            (std::vector<std::string>{"loss_scale", "keep_batchnorm_fp32", "fp32_modules", "casts",
                                      "opt_level", "lr_dec_epoch", "fp8_skip_modules",
                                      "fp8_recipe", "fp8_margin", "fp8_history"}));
  for (const char* word : {"", "teleport", "Loss_scale", "union "}) {
    EXPECT_FALSE(parse_tune_move_kind(word)) << word;
  }
  for (const Objective o : {Objective::kPrecision, Objective::kSpeed}) {
    EXPECT_EQ(parse_objective(to_string(o)), o);
  }
  EXPECT_EQ(to_string(Objective::kSpeed), "speed");
  EXPECT_FALSE(parse_objective("accuracy"));
  EXPECT_FALSE(parse_objective("Speed"));
  // A search's own move named in tune.moves is the schema's error, naming the key.
  try {
    parse_sweep(
        "name: t\ntune: {tolerance: {abs: 1}, reference: {amp.opt_level: O0}, start: {},\n"
        "       moves: [union]}\n",
        "x.yaml");
    ADD_FAILURE() << "tune.moves: [union] accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tune.moves[0] must be one of"), std::string::npos)
        << e.what();
  }
}

TEST(CoreSweep, AGridOverDataPathsHasOneCellPerPath) {
  const Sweep sweep =
      parse_sweep("name: d\ngrid:\n  data.root: [/data/a, /data/b]\n  seed: [1, 2]\n", "<string>");
  ASSERT_EQ(sweep.cells.size(), 4u);
  EXPECT_EQ(sweep.cells[0].hash, sweep.cells[2].hash);  // same config, other path
  EXPECT_NE(sweep.cells[0].hash, sweep.cells[1].hash);  // another seed
  EXPECT_THROW(parse_sweep("name: d\ngrid:\n  checkpoint.dir: [/a, /b]\n", "<string>"),
               ConfigError);  // where files go makes no other cell: a duplicate
}

TEST(CoreSweep, LoadsFromAFileAndKeepsItsText) {
  testing::ScratchDir dir;
  const std::string text = "name: from-file.v1\ndescription: a test\nbase: {optim.lr: 0.5}\n";
  const std::string path = dir.write("s.yaml", text);
  const Sweep sweep = load_sweep(path);
  EXPECT_EQ(sweep.name, "from-file.v1");
  EXPECT_EQ(sweep.description, "a test");
  EXPECT_EQ(sweep.source_path, path);
  EXPECT_EQ(sweep.yaml_text, text);
  EXPECT_DOUBLE_EQ(sweep.base.get_double("optim.lr"), 0.5);
}

TEST(CoreSweep, BaseMixesNestedAndDottedKeys) {
  const Sweep sweep = parse_sweep(R"(
name: mixed
base:
  model: {name: resnet18, small_input: true}
  data.batch_size: 64
  optim:
    lr: 0.05
    betas: [0.8, 0.99]
  schedule.lr_dec_epoch: [17]
  seed: 3
)",
                                  "<string>");
  const Config c = sweep.cells.at(0).config();
  EXPECT_EQ(c.get_string("model.name"), "resnet18");
  EXPECT_TRUE(c.get_bool("model.small_input"));
  EXPECT_EQ(c.get_int("data.batch_size"), 64);
  EXPECT_DOUBLE_EQ(c.get_double("optim.lr"), 0.05);
  EXPECT_EQ(c.get_double_list("optim.betas"), (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(c.get_int_list("schedule.lr_dec_epoch"), (std::vector<int64_t>{17}));
  EXPECT_EQ(c.get_int("seed"), 3);
}

TEST(CoreSweep, GridIsACartesianProductWithTheFirstKeySlowest) {
  const Sweep sweep = parse_sweep(R"(
name: g
grid:
  optim.lr: [0.05, 0.1]
  data.batch_size: [64, 128, 256]
)",
                                  "<string>");
  EXPECT_EQ(sweep.axis_keys, (std::vector<std::string>{"optim.lr", "data.batch_size"}));
  EXPECT_EQ(labels(sweep.cells),
            (std::vector<std::string>{
                "optim.lr=0.05 data.batch_size=64", "optim.lr=0.05 data.batch_size=128",
                "optim.lr=0.05 data.batch_size=256", "optim.lr=0.1 data.batch_size=64",
                "optim.lr=0.1 data.batch_size=128", "optim.lr=0.1 data.batch_size=256"}));
  for (size_t i = 0; i < sweep.cells.size(); ++i) {
    const Cell& cell = sweep.cells[i];
    EXPECT_EQ(cell.index, static_cast<int>(i));
    EXPECT_EQ(cell.config().get_double("optim.lr"), cell.axes["optim.lr"].get<double>());
    EXPECT_EQ(cell.config().get_int("data.batch_size"), cell.axes["data.batch_size"].get<int64_t>());
    EXPECT_EQ(cell.hash, cell.config().hash());
  }
  // axes keep declaration order (not sorted)
  EXPECT_EQ(sweep.cells[0].axes.dump(), R"({"optim.lr":0.05,"data.batch_size":64})");
}

TEST(CoreSweep, GridAcceptsNestedKeysAndListValuedKeys) {
  const Sweep sweep = parse_sweep(R"(
name: g
grid:
  schedule:
    lr_dec_epoch: [[17], [10, 15]]
)",
                                  "<string>");
  EXPECT_EQ(labels(sweep.cells), (std::vector<std::string>{"schedule.lr_dec_epoch=[17]",
                                                           "schedule.lr_dec_epoch=[10,15]"}));
  EXPECT_EQ(sweep.cells[1].config().get_int_list("schedule.lr_dec_epoch"),
            (std::vector<int64_t>{10, 15}));
}

TEST(CoreSweep, ZipAdvancesTogetherAndCrossesTheGrid) {
  const Sweep sweep = parse_sweep(R"(
name: z
grid: {optim.name: [sgd, adam]}
zip:
  - {optim.lr: [0.1, 0.2], data.batch_size: [128, 256]}
)",
                                  "<string>");
  EXPECT_EQ(labels(sweep.cells),
            (std::vector<std::string>{"optim.name=sgd optim.lr=0.1 data.batch_size=128",
                                      "optim.name=sgd optim.lr=0.2 data.batch_size=256",
                                      "optim.name=adam optim.lr=0.1 data.batch_size=128",
                                      "optim.name=adam optim.lr=0.2 data.batch_size=256"}));
}

TEST(CoreSweep, AxesFollowTheOrderOfTheBlocksInTheFile) {
  const Sweep sweep = parse_sweep(R"(
name: z
repeat: 2
zip:
  - {optim.lr: [0.1, 0.2], data.batch_size: [128, 256]}
  - {optim.momentum: [0.8, 0.9]}
grid: {optim.name: [sgd, adam]}
)",
                                  "<string>");
  EXPECT_EQ(sweep.axis_keys, (std::vector<std::string>{"seed", "optim.lr", "data.batch_size",
                                                       "optim.momentum", "optim.name"}));
  ASSERT_EQ(sweep.cells.size(), 2u * 2u * 2u * 2u);
  EXPECT_EQ(sweep.cells[0].label(),
            "seed=0 optim.lr=0.1 data.batch_size=128 optim.momentum=0.8 optim.name=sgd");
  EXPECT_EQ(sweep.cells[1].label(),
            "seed=0 optim.lr=0.1 data.batch_size=128 optim.momentum=0.8 optim.name=adam");
  EXPECT_EQ(sweep.cells[15].label(),
            "seed=1 optim.lr=0.2 data.batch_size=256 optim.momentum=0.9 optim.name=adam");
}

TEST(CoreSweep, ExcludeDropsCellsMatchingAllKeysOfAnEntry) {
  const Sweep sweep = parse_sweep(R"(
name: e
grid:
  optim.lr: [0.05, 0.1]
  data.batch_size: [64, 128, 256]
exclude:
  - {optim.lr: 0.1, data.batch_size: 64}
  - {data: {batch_size: 256}}
)",
                                  "<string>");
  EXPECT_EQ(labels(sweep.cells), (std::vector<std::string>{"optim.lr=0.05 data.batch_size=64",
                                                           "optim.lr=0.05 data.batch_size=128",
                                                           "optim.lr=0.1 data.batch_size=128"}));
  for (size_t i = 0; i < sweep.cells.size(); ++i) EXPECT_EQ(sweep.cells[i].index, (int)i);
}

TEST(CoreSweep, ExcludeEntryThatMatchesNothingOnlyWarns) {
  ::testing::internal::CaptureStderr();
  const Sweep sweep = parse_sweep(R"(
name: e
zip: [{optim.lr: [0.1, 0.2], data.batch_size: [128, 256]}]
exclude: [{optim.lr: 0.1, data.batch_size: 256}]
)",
                                  "w.yaml");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(sweep.cells.size(), 2u);
  EXPECT_NE(err.find("w.yaml:4:11: exclude entry 1 matches no cell"), std::string::npos) << err;
}

TEST(CoreSweep, RepeatCountStartsAtTheBaseSeed) {
  const Sweep sweep = parse_sweep(R"(
name: r
base: {seed: 5}
grid: {optim.lr: [0.1, 0.2]}
repeat: 3
)",
                                  "<string>");
  ASSERT_EQ(sweep.cells.size(), 6u);
  EXPECT_EQ(sweep.cells[0].label(), "optim.lr=0.1 seed=5");
  EXPECT_EQ(sweep.cells[2].label(), "optim.lr=0.1 seed=7");
  EXPECT_EQ(sweep.cells[3].config().get_int("seed"), 5);
  EXPECT_EQ(sweep.axis_keys.back(), "seed");
  // --set seed moves the first seed of a counted repeat
  const Sweep moved = parse_sweep("name: r\nrepeat: 2\n", "<string>", {"seed=10"});
  EXPECT_EQ(labels(moved.cells), (std::vector<std::string>{"seed=10", "seed=11"}));
}

TEST(CoreSweep, RepeatListGivesExplicitSeeds) {
  const Sweep sweep = parse_sweep("name: r\nbase: {seed: 5}\nrepeat: [0, 7]\n", "<string>");
  EXPECT_EQ(labels(sweep.cells), (std::vector<std::string>{"seed=0", "seed=7"}));
}

TEST(CoreSweep, SetOverridesBaseBeforeExpansion) {
  const Sweep sweep = parse_sweep(
      R"(
name: s
base: {optim: {lr: 0.1}, schedule.epochs: 2}
grid: {data.batch_size: [64, 128]}
)",
      "<string>",
      {"optim.lr=0.05", "schedule.lr_dec_epoch=[17]", "optim.eps=1e-8", "model.weights="});
  EXPECT_DOUBLE_EQ(sweep.base.get_double("optim.lr"), 0.05);
  for (const Cell& cell : sweep.cells) {
    EXPECT_DOUBLE_EQ(cell.config().get_double("optim.lr"), 0.05);
    EXPECT_EQ(cell.config().get_int("schedule.epochs"), 2);
    EXPECT_EQ(cell.config().get_int_list("schedule.lr_dec_epoch"), (std::vector<int64_t>{17}));
    EXPECT_DOUBLE_EQ(cell.config().get_double("optim.eps"), 1e-8);
  }
  const Sweep plain = parse_sweep(R"(
name: s
base: {optim: {lr: 0.1}, schedule.epochs: 2}
grid: {data.batch_size: [64, 128]}
)",
                                  "<string>");
  EXPECT_NE(plain.cells[0].hash, sweep.cells[0].hash);
}

TEST(CoreSweep, OnlyKeepsCellsWithTheCoercedValue) {
  const Sweep sweep = parse_sweep(R"(
name: o
grid:
  optim.lr: [0.05, 0.1]
  data.batch_size: [64, 128, 256]
)",
                                  "<string>");
  const auto lr = filter_cells(sweep.cells, {"optim.lr=1e-1"});
  EXPECT_EQ(labels(lr), (std::vector<std::string>{"optim.lr=0.1 data.batch_size=64",
                                                  "optim.lr=0.1 data.batch_size=128",
                                                  "optim.lr=0.1 data.batch_size=256"}));
  EXPECT_EQ(lr[0].index, 3);  // original positions are kept
  const auto both = filter_cells(sweep.cells, {"optim.lr=0.05", "data.batch_size=128"});
  ASSERT_EQ(both.size(), 1u);
  EXPECT_EQ(both[0].index, 1);
  EXPECT_EQ(filter_cells(sweep.cells, {"optim.name=sgd"}).size(), 6u);  // a base key
  EXPECT_TRUE(filter_cells(sweep.cells, {"optim.lr=0.3"}).empty());
  EXPECT_EQ(filter_cells(sweep.cells, {}).size(), 6u);
  try {
    filter_cells(sweep.cells, {"optim.lrr=0.1"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--only optim.lrr=0.1: unknown config key optim.lrr; "
                                         "did you mean optim.lr?"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(filter_cells(sweep.cells, {"optim.lr=abc"}), ConfigError);
  EXPECT_THROW(filter_cells(sweep.cells, {"optim.lr"}), UsageError);
}

TEST(CoreSweep, HashDoesNotDependOnKeyOrderOrSpelling) {
  const Sweep a = parse_sweep(R"(
name: a
base:
  optim: {lr: 0.1, name: adam}
  data.batch_size: 64
  model.width: 1
)",
                              "<string>");
  const Sweep b = parse_sweep(R"(
name: b
base:
  model: {width: 1.0}
  data: {batch_size: 64}
  optim.name: adam
  optim.lr: 1e-1
)",
                              "<string>");
  EXPECT_EQ(a.cells[0].hash, b.cells[0].hash);
  EXPECT_EQ(a.cells[0].config().canonical_json(), b.cells[0].config().canonical_json());
}

}  // namespace
}  // namespace amptune
