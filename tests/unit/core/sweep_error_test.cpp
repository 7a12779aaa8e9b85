// One test per class of sweep error: each checks that the message names file:line:column (1-based)
// and the key, for a real file in a scratch directory.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sweep.h"
#include "support/scratch.h"

namespace amptune {
namespace {

class CoreSweepError : public ::testing::Test {
 protected:
  // Loads `text` from x.yaml and returns the ConfigError message with the file path replaced by
  // "x.yaml" (the scratch directory differs from run to run).
  std::string error(const std::string& text, const std::vector<std::string>& sets = {}) {
    path_ = dir_.write("x.yaml", text);
    try {
      load_sweep(path_, sets);
    } catch (const ConfigError& e) {
      std::string message = e.what();
      for (size_t at = message.find(path_); at != std::string::npos; at = message.find(path_)) {
        message.replace(at, path_.size(), "x.yaml");
      }
      return message;
    }
    ADD_FAILURE() << "accepted:\n" << text;
    return "";
  }

  testing::ScratchDir dir_;
  std::string path_;
};

#define EXPECT_HAS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "message: " << (message)

TEST_F(CoreSweepError, UnknownTopLevelKey) {
  const std::string m = error("name: t\ngird:\n  optim.lr: [0.1]\n");
  EXPECT_HAS(m, "x.yaml:2:1: unknown top-level key gird; did you mean grid?");
  EXPECT_HAS(error("name: t\noptim: {lr: 0.1}\n"),
             "x.yaml:2:1: unknown top-level key optim; config keys go under base:");
  EXPECT_HAS(error("name: t\nname: u\n"), "x.yaml:2:1: top-level key name is given twice");
}

// prune: (schemas/sweep.yaml) is checked key by key against its schema, naming file:line:column.
TEST_F(CoreSweepError, PruneBlock) {
  EXPECT_HAS(error("name: t\nprune: {rule: hyperband}\n"),
             "x.yaml:2:15: prune.rule must be one of none, asha, median, got \"hyperband\"");
  EXPECT_HAS(error("name: t\nprune:\n  rule: asha\n  eta: 1\n"), "x.yaml:4:8: ");
  EXPECT_HAS(error("name: t\nprune:\n  rule: asha\n  eta: 1\n"), "prune.eta");
  EXPECT_HAS(error("name: t\nprune:\n  etta: 3\n"),
             "x.yaml:3:3: unknown config key prune.etta (in prune); did you mean prune.eta?");
  EXPECT_HAS(error("name: t\nprune: asha\n"), "x.yaml:2:8: prune must be a mapping");
  EXPECT_HAS(error("name: t\nprune: {grace_epochs: 0}\n"), "prune.grace_epochs");
}

TEST_F(CoreSweepError, TuneBlock) {
  const std::string head = "name: t\ntune:\n  reference: {amp.opt_level: O0}\n";
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  moves: [loss_scale, fp64]\n"
                          "  tolerance: {abs: 1}\n"),
             "x.yaml:5:");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  moves: [loss_scale, fp64]\n"
                          "  tolerance: {abs: 1}\n"),
             "tune.moves[1] must be one of loss_scale, keep_batchnorm_fp32, fp32_modules");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  tolerance: {abs: 0}\n"),
             "x.yaml:5:20: tune.tolerance.abs must be > 0, got 0.0");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  tolerance: {abs: -1}\n"),
             "x.yaml:5:20: tune.tolerance.abs must be >= 0");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1, rel: 0.1}\n"),
             "x.yaml:5:28: tune.tolerance takes abs or rel, not both");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n"), "x.yaml:2:1: tune needs a tolerance");
  EXPECT_HAS(error("name: t\ntune:\n  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n"),
             "x.yaml:2:1: tune needs reference");
  EXPECT_HAS(error(head + "  start: {amp.opt_lvl: O1}\n  tolerance: {abs: 1}\n"),
             "x.yaml:4:11: unknown config key amp.opt_lvl (in tune.start); did you mean "
             "amp.opt_level?");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n"
                          "  fork_from: later\n"),
             "x.yaml:6:14: tune.fork_from must be auto or an epoch number");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n"
                          "  budget: {epoch: 4}\n"),
             "x.yaml:6:12: unknown config key tune.budget.epoch (in tune); did you mean "
             "tune.budget.epochs?");
  EXPECT_HAS(error(head + "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n"
                          "  halving: {eta: 1}\n"),
             "tune.halving.eta");
  EXPECT_HAS(error("name: t\ngrid: {optim.lr: [0.1, 0.2]}\n" + head.substr(8) +
                   "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n"),
             "x.yaml:2:1: a sweep with a tune: block (line 3) makes its own runs from base: grid "
             "cannot go with it");
  EXPECT_HAS(error("name: t\ntune: [a]\n"), "x.yaml:2:7: tune must be a mapping");
}

TEST_F(CoreSweepError, UnknownConfigKeyWithDidYouMean) {
  EXPECT_HAS(error("name: t\nbase:\n  optim:\n    lrr: 0.1\n"),
             "x.yaml:4:5: unknown config key optim.lrr (in base); did you mean optim.lr?");
  EXPECT_HAS(error("name: t\ngrid:\n  schedule.epoch: [1, 2]\n"),
             "x.yaml:3:3: unknown config key schedule.epoch (in grid); did you mean "
             "schedule.epochs?");
  EXPECT_HAS(error("name: t\nbase:\n  optim: 0.1\n"),
             "x.yaml:3:3: optim is a group of config keys, not a key");
}

TEST_F(CoreSweepError, WrongType) {
  EXPECT_HAS(error("name: t\nbase:\n  schedule.epochs: many\n"),
             "x.yaml:3:20: schedule.epochs must be an integer, got \"many\"");
  EXPECT_HAS(error("name: t\nbase:\n  schedule.lr_dec_epoch: 17\n"),
             "x.yaml:3:26: schedule.lr_dec_epoch must be a list");
  EXPECT_HAS(error("name: t\ngrid:\n  schedule.lr_dec_epoch: [17, 20]\n"),
             "x.yaml:3:27: schedule.lr_dec_epoch takes a list, so each value in grid is a list");
  EXPECT_HAS(error("name: t\ngrid: {optim.lr: 0.1}\n"),
             "x.yaml:2:18: in grid, optim.lr must be a list of the values to try");
}

TEST_F(CoreSweepError, OutOfRangeValue) {
  EXPECT_EQ(error("name: t\nbase:\n  schedule:\n    epochs: -1\n"),
            "x.yaml:4:13: schedule.epochs must be >= 0, got -1");
}

TEST_F(CoreSweepError, ValueNotAmongChoices) {
  EXPECT_EQ(error("name: t\ngrid:\n  optim.name: [sgd, adamw]\n"),
            "x.yaml:3:21: optim.name must be one of sgd, adam, got \"adamw\"");
}

TEST_F(CoreSweepError, EmptyGridList) {
  EXPECT_HAS(error("name: t\ngrid:\n  optim.lr: []\n"),
             "x.yaml:3:13: in grid, the list of optim.lr is empty");
}

TEST_F(CoreSweepError, GridKeyAlsoInZip) {
  EXPECT_HAS(error("name: t\ngrid:\n  optim.lr: [0.1, 0.2]\nzip:\n"
                   "  - {optim.lr: [0.3, 0.4], data.batch_size: [64, 128]}\n"),
             "x.yaml:5:6: optim.lr is swept twice: in grid at x.yaml:3:3 and in zip group 1");
}

TEST_F(CoreSweepError, ZipListsOfUnequalLength) {
  EXPECT_HAS(
      error("name: t\nzip:\n  - optim.lr: [0.1, 0.2]\n    data.batch_size: [64, 128, 256]\n"),
      "x.yaml:3:5: zip group 1: the lists advance together and need the same length, "
      "but optim.lr has 2 values and data.batch_size has 3");
}

TEST_F(CoreSweepError, ExcludeNamesAKeyThatIsNotSwept) {
  EXPECT_HAS(error("name: t\ngrid: {optim.lr: [0.1, 0.2]}\nexclude:\n"
                   "  - {optim.lr: 0.1, data.batch_size: 64}\n"),
             "x.yaml:4:21: exclude entry 1 names data.batch_size, which is not swept");
  EXPECT_HAS(error("name: t\ngrid: {optim.lr: [0.1, 0.2]}\nexclude: [{optim.lr: 0.3}]\n"),
             "x.yaml:3:22: exclude entry 1: optim.lr=0.3 is not one of its swept values 0.1, 0.2");
}

TEST_F(CoreSweepError, DuplicateCells) {
  EXPECT_HAS(error("name: t\ngrid:\n  optim.lr: [0.1, 0.2, 1e-1]\n"),
             "x.yaml:3:24: duplicate cell: grid lists optim.lr=0.1 twice (also at x.yaml:3:14)");
  EXPECT_HAS(error("name: t\nrepeat: [1, 2, 1]\n"),
             "x.yaml:2:16: duplicate cell: repeat lists seed=1 twice");
  EXPECT_HAS(
      error("name: t\nzip:\n  - {optim.lr: [0.1, 0.1], data.batch_size: [64, 64]}\n"),
      "x.yaml:3:22: duplicate cell: zip group 1 lists optim.lr=0.1 data.batch_size=64 twice");
}

TEST_F(CoreSweepError, AllCellsExcluded) {
  EXPECT_HAS(error("name: t\ngrid: {optim.lr: [0.1, 0.2]}\nexclude:\n  - {optim.lr: 0.1}\n"
                   "  - {optim.lr: 0.2}\n"),
             "x.yaml:3:1: exclude drops all 2 cells; nothing would run");
}

TEST_F(CoreSweepError, YamlSyntaxError) {
  const std::string m = error("name: t\ngrid:\n  optim.lr: [0.1, 0.2\n  data.batch_size: [64]\n");
  EXPECT_TRUE(std::regex_search(m, std::regex("^x\\.yaml:[0-9]+:[0-9]+: YAML syntax error: ")))
      << m;
}

TEST_F(CoreSweepError, SetOfASweptKeyPointsToOnly) {
  const std::string m = error("name: t\ngrid:\n  optim.lr: [0.1, 0.2]\n", {"optim.lr=0.5"});
  EXPECT_HAS(m, "--set optim.lr=0.5: optim.lr is swept by grid at x.yaml:3:3");
  EXPECT_HAS(m, "--only optim.lr=<value>");
  EXPECT_HAS(error("name: t\nrepeat: [1, 2]\n", {"seed=3"}), "seed is swept by repeat");
  EXPECT_HAS(error("name: t\n", {"optim.lrr=0.5"}),
             "--set optim.lrr=0.5: unknown config key optim.lrr; did you mean optim.lr?");
  EXPECT_EQ(error("name: t\n", {"schedule.epochs=-1"}),
            "--set schedule.epochs=-1: schedule.epochs must be >= 0, got -1");
}

TEST_F(CoreSweepError, NameMissingOrInvalid) {
  EXPECT_HAS(error("base: {optim.lr: 0.1}\n"), "x.yaml: the sweep has no name");
  EXPECT_HAS(error("name: my sweep\n"), "x.yaml:1:7: name must be letters, digits");
  EXPECT_HAS(error(""), "x.yaml: the sweep file is empty");
}

TEST_F(CoreSweepError, KeyGivenTwiceInOneBlock) {
  EXPECT_HAS(error("name: t\nbase:\n  optim.lr: 0.1\n  optim: {lr: 0.2}\n"),
             "x.yaml:4:11: optim.lr is given twice in base (first at x.yaml:3:3)");
}

TEST_F(CoreSweepError, RepeatOfWrongShape) {
  EXPECT_HAS(error("name: t\nrepeat: 0\n"), "x.yaml:2:9: repeat must be >= 1, got 0");
  EXPECT_HAS(error("name: t\nrepeat: {a: 1}\n"), "x.yaml:2:9: repeat must be a count");
  EXPECT_HAS(error("name: t\ngrid: {seed: [1, 2]}\nrepeat: 2\n"),
             "x.yaml:3:1: seed is swept twice: in grid at x.yaml:2:8 and in repeat");
}

// Nested YAML anchors make a 362-byte value of 10^9 leaves: the message shows one line of it
// and comes at once (it used to expand the whole value first).
TEST_F(CoreSweepError, AnAnchorBombIsNamedWithoutExpandingIt) {
  std::string lists = "[&a [1,1,1,1,1,1,1,1,1,1]";
  for (char c = 'b'; c <= 'i'; ++c) {
    std::string row;
    for (int i = 0; i < 10; ++i) row += std::string(i ? "," : "") + "*" + char(c - 1);
    lists += std::string(", &") + c + " [" + row + "]";
  }
  const std::string m = error("name: bomb\nbase: {seed: 0}\ngrid:\n  optim.lr: [" + lists + "]]\n");
  EXPECT_HAS(m, "x.yaml:4:");
  EXPECT_HAS(m, "optim.lr must be a single value, got [[1, 1, 1");
  EXPECT_LT(m.size(), 300u) << m;
}

// A forks: grid is capped like the cell grid: 4 keys x 100 values would be 10^8 override sets.
TEST_F(CoreSweepError, AForksGridIsCapped) {
  std::string values;
  for (int i = 0; i < 100; ++i) values += std::string(i ? ", " : "") + std::to_string(i + 1);
  const std::string m = error(
      "name: f\nbase: {schedule.epochs: 3}\ngrid: {seed: [1, 2]}\nforks:\n"
      "  - from: {epoch: 0}\n    grid:\n      optim.lr: [" + values + "]\n"
      "      optim.momentum: [" + values.substr(0, 0) + "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]\n"
      "      schedule.lr_dec_factor: [" + values + "]\n"
      "      optim.weight_decay: [" + values + "]\n"
      "      amp.growth_interval: [" + values + "]\n");
  EXPECT_HAS(m, "expands to more than 1000000 override sets");
  EXPECT_HAS(m, "x.yaml:");
}

// A list entry given twice names both places; every list key where a repeat means nothing.
TEST_F(CoreSweepError, RepeatedListEntriesAreRefused) {
  EXPECT_EQ(error("name: t\nbase:\n  amp.fp32_modules: [conv1, fc,\n    conv1]\n"),
            "x.yaml:4:5: amp.fp32_modules[2] repeats \"conv1\" (first at amp.fp32_modules[0], "
            "x.yaml:3:22); list each entry once");
  EXPECT_HAS(error("name: t\ngrid:\n  casts.int32: [[bbox], [bbox, k_value, bbox]]\n"),
             "x.yaml:3:41: casts.int32[2] repeats \"bbox\"");
  EXPECT_HAS(error("name: t\nbase: {rootnet.train_sets: [muco, muco]}\n"),
             "rootnet.train_sets[1] repeats \"muco\"");
  EXPECT_HAS(error("name: t\nbase: {checkpoint.keep_epochs: [3, 3]}\n"),
             "checkpoint.keep_epochs[1] repeats 3");
  EXPECT_HAS(error("name: t\nbase: {}\n", {"amp.fp32_modules=[fc, fc]"}),
             "amp.fp32_modules[1] repeats \"fc\"");
  const std::string tune = "name: t\ntune:\n  reference: {amp.opt_level: O0}\n"
                           "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n";
  EXPECT_HAS(error(tune + "  moves: [casts, loss_scale, casts]\n"),
             "x.yaml:6:30: tune.moves[2] repeats \"casts\"");
}

// List lengths are capped (10,000 copies of conv1 made tune bisect for 19,998 rounds), checked
// by the list's size before its entries are read.
TEST_F(CoreSweepError, ListLengthsAreCapped) {
  std::string copies;
  for (int i = 0; i < 10000; ++i) copies += std::string(i ? ", " : "") + "conv1";
  EXPECT_EQ(error("name: t\nbase:\n  amp.fp32_modules: [" + copies + "]\n"),
            "x.yaml:3:21: amp.fp32_modules has 10000 entries, more than the 1024 it takes (its "
            "entry in schemas/ says why); shorten the list");
  std::string names;
  for (int i = 0; i < 1025; ++i) names += std::string(i ? ", " : "") + "m" + std::to_string(i);
  EXPECT_HAS(error("name: t\nbase: {amp.fp32_modules: [" + names + "]}\n"),
             "amp.fp32_modules has 1025 entries, more than the 1024");
  EXPECT_HAS(error("name: t\nbase: {profile.steps: [1, 2, 3]}\n"),
             "x.yaml:2:23: profile.steps has 3 entries, more than the 2");
  EXPECT_HAS(error("name: t\nbase: {optim.betas: [0.9, 0.99, 0.999]}\n"),
             "optim.betas has 3 entries, more than the 2");
}

// Integers whose size costs time or memory have a maximum (schemas/*.yaml give the reasons).
TEST_F(CoreSweepError, CostlyIntegersHaveMaxima) {
  EXPECT_EQ(error("name: t\ntune:\n  reference: {amp.opt_level: O0}\n"
                  "  start: {amp.opt_level: O1}\n  tolerance: {abs: 1}\n"
                  "  diagnose: {batches: 2147483647}\n"),
            "x.yaml:6:23: tune.diagnose.batches must be <= 1024, got 2147483647");
  EXPECT_HAS(error("name: t\nbase: {schedule.epochs: 100001}\n"),
             "schedule.epochs must be <= 100000, got 100001");
  EXPECT_HAS(error("name: t\nbase: {model.num_classes: 2000000000}\n"),
             "model.num_classes must be <= 1000000");
  EXPECT_HAS(error("name: t\nbase: {model.in_channels: 100000}\n"),
             "model.in_channels must be <= 1024");
  EXPECT_HAS(error("name: t\nbase: {threads: 1000000}\n"), "threads must be <= 1024");
}

TEST(CoreSweepFile, MissingFileIsAConfigErrorNamingThePath) {
  testing::ScratchDir dir;
  const std::string path = (dir.path() / "absent.yaml").string();
  try {
    load_sweep(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": cannot read the sweep file"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace amptune
