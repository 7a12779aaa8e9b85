// Keeps code, schemas/config.yaml and experiments/*.yaml in step:
//  - every config key that code under src/ reads by a string literal is documented;
//  - Settings::from reads every documented key exactly once (one field per key);
//  - the enum classes of core/words.h and core/tune_words.h name exactly the choices of their
//    keys;
//  - every sweep file in experiments/ validates.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/embedded.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/sweep.h"
#include "core/tune_words.h"
#include "core/words.h"

namespace amptune {
namespace {

namespace fs = std::filesystem;

struct KeyUse {
  std::string key;
  int line = 0;
};

// Config keys read by a literal: get_int("k"), cfg.get_double_list("k"), config.at("k"), ...
// at("k") is also how JSON objects are read, so it counts only for dotted keys whose first part
// is a documented group (config.at("optim.lr")), never for json.at("images").
std::vector<KeyUse> config_keys_in(const std::string& text, const Schema& schema) {
  static const std::regex kGetter(
      R"(\b(get_int|get_double|get_bool|get_string|get_int_list|get_double_list|get_string_list|at)\s*\(\s*"([^"\\]*)\")");
  std::vector<KeyUse> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kGetter);
       it != std::sregex_iterator(); ++it) {
    const std::string fn = (*it)[1];
    const std::string key = (*it)[2];
    if (fn == "at") {
      const auto dot = key.find('.');
      if (dot == std::string::npos || !schema.is_group(key.substr(0, dot))) continue;
    }
    const int line =
        1 + static_cast<int>(std::count(text.begin(), text.begin() + it->position(), '\n'));
    out.push_back(KeyUse{key, line});
  }
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CoreSchemaSync, ScannerFindsConfigReadsAndSkipsJsonReads) {
  const std::string sample = R"(
    int64_t e = config.get_int("schedule.epochs");
    auto lr = cfg->get_double ( "optim.lrr" );
    const auto& v = config.at("optim.name");
    auto images = doc.at("images");
    auto file = doc.at("labels.json");  // "labels" is no config group
    std::string s = get_string(row, 3);
  )";
  const auto uses = config_keys_in(sample, Schema::builtin());
  ASSERT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses[0].key, "schedule.epochs");
  EXPECT_EQ(uses[0].line, 2);
  EXPECT_EQ(uses[1].key, "optim.lrr");  // found, and undocumented: the real test would fail
  EXPECT_EQ(Schema::builtin().find(uses[1].key), nullptr);
  EXPECT_EQ(uses[2].key, "optim.name");
}

TEST(CoreSchemaSync, EveryConfigKeyReadInSourceIsDocumented) {
  const fs::path src = fs::path(AMPTUNE_SOURCE_DIR) / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  const Schema& schema = Schema::builtin();
  std::vector<std::string> undocumented;
  size_t files = 0, uses = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
    ++files;
    for (const KeyUse& use : config_keys_in(read_file(entry.path()), schema)) {
      ++uses;
      if (!schema.find(use.key)) {
        std::string close = schema.suggest(use.key);
        undocumented.push_back(fs::relative(entry.path(), AMPTUNE_SOURCE_DIR).string() + ":" +
                               std::to_string(use.line) + ": " + use.key +
                               (close.empty() ? "" : " (did you mean " + close + "?)"));
      }
    }
  }
  EXPECT_GT(files, 0u);
  std::string list;
  for (const auto& u : undocumented) list += "\n  " + u;
  EXPECT_TRUE(undocumented.empty())
      << "config keys read in code but missing from schemas/config.yaml (add them there with "
         "type, default and doc, or fix the spelling):"
      << list;
  RecordProperty("config_key_reads", static_cast<int>(uses));
}

// What is wrong with Settings::from's `reads` against `schema`: keys no section read, keys read
// more than once (with the sections that read them), keys read that the schema lacks.
std::vector<std::string> settings_coverage_problems(const Schema& schema,
                                                    const std::vector<KeyRead>& reads) {
  std::map<std::string, std::vector<std::string>> sections_of;
  for (const KeyRead& r : reads) sections_of[r.key].push_back(r.section);
  std::vector<std::string> problems;
  for (const KeySpec& spec : schema.keys()) {
    const auto it = sections_of.find(spec.key);
    if (it == sections_of.end()) {
      problems.push_back(spec.key + " is read by no section");
    } else if (it->second.size() > 1) {
      problems.push_back(spec.key + " is read " + std::to_string(it->second.size()) +
                         " times, by " + join(it->second, ", "));
    }
  }
  for (const auto& [key, sections] : sections_of) {
    if (!schema.find(key)) {
      problems.push_back(key + " is read by " + sections[0] + " but undocumented");
    }
  }
  return problems;
}

TEST(CoreSchemaSync, CoverageCheckFindsAKeyWithoutAField) {
  // The builtin schema plus one key that no section reads.
  const Schema schema = Schema::parse(
      std::string(embedded::config_yaml) + "\noptim.extra:\n  type: int\n  default: 0\n  doc: x\n",
      "test schema");
  std::vector<KeyRead> reads;
  (void)Settings::from(Config(schema), &reads);
  EXPECT_EQ(settings_coverage_problems(schema, reads),
            std::vector<std::string>{"optim.extra is read by no section"});
  reads.push_back(KeyRead{"amp", "optim.lr"});
  reads.push_back(KeyRead{"amp", "optim.lrr"});
  const auto problems = settings_coverage_problems(Schema::builtin(), reads);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "optim.lr is read 2 times, by optim, amp");
  EXPECT_EQ(problems[1], "optim.lrr is read by amp but undocumented");
}

TEST(CoreSchemaSync, SettingsReadEveryKeyExactlyOnce) {
  std::vector<KeyRead> reads;
  const Settings settings = Settings::from(Config(), &reads);
  std::string list;
  for (const auto& p : settings_coverage_problems(Schema::builtin(), reads)) list += "\n  " + p;
  EXPECT_TRUE(list.empty())
      << "every key of schemas/config.yaml needs one typed field, read once in "
         "src/core/settings.cpp (Settings::from):"
      << list;
  EXPECT_EQ(reads.size(), Schema::builtin().keys().size());
  // The values are the config's.
  EXPECT_EQ(settings.schedule.epochs, Config().get_int("schedule.epochs"));
  EXPECT_EQ(settings.amp.loss_scale.word, LossScaleWord::kAuto);
  EXPECT_EQ(settings.data.mean, Config().get_double_list("data.mean"));
}

// The words of `key`'s choices in `schema` (and the words its type takes besides, `type_words`)
// that `parse` does not read back to themselves, and the values below `count` whose word is
// not one of them: a word added to the schema without its value (Settings::from would refuse a
// valid config), or a value without its word.
template <class E, class Parse>
std::vector<std::string> word_table_problems(const Schema& schema, const std::string& key,
                                             Parse parse, int count,
                                             const std::vector<std::string>& type_words = {}) {
  const KeySpec* spec = schema.find(key);
  if (!spec) return {key + " is not in the schema"};
  std::vector<std::string> words = spec->choices;
  words.insert(words.end(), type_words.begin(), type_words.end());
  std::vector<std::string> problems;
  for (const std::string& word : words) {
    const std::optional<E> value = parse(word);
    if (!value || to_string(*value) != word) problems.push_back(key + ": " + word + " unread");
  }
  for (int i = 0; i < count; ++i) {
    const std::string word = to_string(static_cast<E>(i));
    if (std::find(words.begin(), words.end(), word) == words.end()) {
      problems.push_back(key + ": value " + word + " is not a choice");
    }
  }
  return problems;
}

TEST(CoreSchemaSync, WordTablesNameExactlyTheChoicesOfTheirKeys) {
  const Schema& config = Schema::builtin();
  const Schema& sweep = Schema::sweep_blocks();
  using Problems = std::vector<std::string>;
  EXPECT_EQ(word_table_problems<OptLevel>(config, "amp.opt_level", parse_opt_level, 4), Problems{});
  EXPECT_EQ(word_table_problems<Dtype>(config, "amp.dtype", parse_dtype, 2), Problems{});
  EXPECT_EQ(word_table_problems<AmpBackend>(config, "amp.backend", parse_amp_backend, 3),
            Problems{});
  EXPECT_EQ(word_table_problems<DistBackend>(config, "dist.backend", parse_dist_backend, 3),
            Problems{});
  EXPECT_EQ(word_table_problems<PruneRule>(sweep, "prune.rule", parse_prune_rule, 3), Problems{});
  EXPECT_EQ(word_table_problems<Objective>(sweep, "tune.objective", parse_objective, 2),
            Problems{});
  // The allowable moves are tune.moves' choices; the search's own (union ...) are not.
  EXPECT_EQ(word_table_problems<TuneMoveKind>(sweep, "tune.moves", parse_tune_move_kind, 6),
            Problems{});
  EXPECT_EQ(word_table_problems<DeviceChoice>(config, "device", parse_device_choice, 3),
            Problems{});
  EXPECT_EQ(
      word_table_problems<MemoryFormat>(config, "model.memory_format", parse_memory_format, 3),
      Problems{});
  EXPECT_EQ(word_table_problems<ModelTask>(config, "model.task", parse_model_task, 2), Problems{});
  EXPECT_EQ(word_table_problems<DataFormat>(config, "data.format", parse_data_format, 4),
            Problems{});
  EXPECT_EQ(word_table_problems<OptimizerName>(config, "optim.name", parse_optimizer_name, 2),
            Problems{});
  EXPECT_EQ(word_table_problems<LrPolicy>(config, "schedule.lr_policy", parse_lr_policy, 2),
            Problems{});
  for (const char* key : {"amp.keep_batchnorm_fp32", "amp.master_weights"}) {
    EXPECT_EQ(word_table_problems<AutoBool>(config, key, parse_auto_bool, 3), Problems{});
  }
  // "dynamic" is the loss_scale type's own word (core/config.h), not one of the key's choices.
  EXPECT_EQ(word_table_problems<LossScaleWord>(config, "amp.loss_scale", parse_loss_scale_word, 2,
                                               {"dynamic"}),
            Problems{});
  // The check can fail: a word the table lacks, a value the schema lacks.
  EXPECT_EQ(
      word_table_problems<Dtype>(
          config, "amp.dtype",
          [](const std::string& w) { return w == "bf16" ? std::nullopt : parse_dtype(w); }, 2),
      Problems{"amp.dtype: bf16 unread"});
  EXPECT_EQ(word_table_problems<AmpBackend>(config, "amp.dtype", parse_amp_backend, 1),
            (Problems{"amp.dtype: fp16 unread", "amp.dtype: bf16 unread",
                      "amp.dtype: value auto is not a choice"}));
}

// A word outside a key's choices stays the config's error, naming the file and key, before
// any table is asked (Settings::from only ever reads a checked word).
TEST(CoreSchemaSync, AWordOutsideTheChoicesIsTheConfigsError) {
  for (const auto& [key, word] :
       std::vector<std::pair<std::string, std::string>>{{"amp.opt_level", "O4"},
                                                        {"amp.dtype", "fp8"},
                                                        {"amp.backend", "fast"},
                                                        {"dist.backend", "mpi"},
                                                        {"device", "gpu"},
                                                        {"model.memory_format", "nhwc"},
                                                        {"model.task", "regression"},
                                                        {"data.format", "csv"},
                                                        {"optim.name", "adamw"},
                                                        {"schedule.lr_policy", "linear"},
                                                        {"amp.master_weights", "yes"}}) {
    Config config;
    try {
      config.set_yaml(key, word, SourceLoc{"x.yaml", 3, 5});
      ADD_FAILURE() << key << ": " << word << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("x.yaml:3:5: " + key + " must be one of"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CoreSchemaSync, EveryExperimentFileValidates) {
  const fs::path dir = fs::path(AMPTUNE_SOURCE_DIR) / "experiments";
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing";
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    try {
      const Sweep sweep = load_sweep(file.string());
      EXPECT_FALSE(sweep.cells.empty());
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  RecordProperty("experiment_files", static_cast<int>(files.size()));
}

}  // namespace
}  // namespace amptune
