#include "core/config.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace amptune {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(CoreConfig, StartsAtEverySchemaDefault) {
  const Config config;
  ASSERT_EQ(config.values().size(), Schema::builtin().keys().size());
  for (const auto& spec : Schema::builtin().keys()) {
    EXPECT_EQ(config.at(spec.key), spec.default_value) << spec.key;
  }
}

TEST(CoreConfig, TypedGettersReadTheirOwnTypesOnly) {
  Config config;
  EXPECT_EQ(config.get_int("schedule.epochs"), 1);
  EXPECT_DOUBLE_EQ(config.get_double("optim.lr"), 0.1);
  EXPECT_FALSE(config.get_bool("optim.nesterov"));
  EXPECT_EQ(config.get_string("optim.name"), "sgd");
  EXPECT_EQ(config.get_double_list("data.crop_scale"), (std::vector<double>{0.08, 1.0}));
  EXPECT_TRUE(config.get_int_list("schedule.lr_dec_epoch").empty());

  const std::string wrong = error_of([&] { config.get_int("optim.lr"); });
  EXPECT_NE(wrong.find("optim.lr has type float"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("get_int"), std::string::npos) << wrong;
  EXPECT_THROW(config.get_double("schedule.epochs"), ConfigError);
  EXPECT_THROW(config.get_string("optim.nesterov"), ConfigError);
  EXPECT_THROW(config.get_int_list("data.crop_scale"), ConfigError);
  const std::string unknown = error_of([&] { config.at("optim.lrr"); });
  EXPECT_NE(unknown.find("unknown config key optim.lrr; did you mean optim.lr?"), std::string::npos)
      << unknown;
  EXPECT_THROW(config.get_int("no.such.key"), ConfigError);
}

TEST(CoreConfig, SetNormalisesAndChecksValues) {
  Config config;
  config.set("optim.lr", 1);  // int given for a float key
  EXPECT_TRUE(config.at("optim.lr").is_number_float());
  EXPECT_DOUBLE_EQ(config.get_double("optim.lr"), 1.0);
  const std::string range = error_of([&] { config.set("schedule.epochs", -1); });
  EXPECT_EQ(range, "schedule.epochs must be >= 0, got -1");
  EXPECT_THROW(config.set("optim.name", "adamw"), ConfigError);
  EXPECT_THROW(config.set("optim.lrr", 0.1), ConfigError);
  EXPECT_EQ(config.get_int("schedule.epochs"), 1);  // failed sets change nothing
}

TEST(CoreConfig, SetYamlParsesTheValueAsYaml) {
  Config config;
  const SourceLoc where{"--set"};
  config.set_yaml("optim.eps", "1e-8", where);
  EXPECT_DOUBLE_EQ(config.get_double("optim.eps"), 1e-8);
  config.set_yaml("schedule.lr_dec_epoch", "[17, 20]", where);
  EXPECT_EQ(config.get_int_list("schedule.lr_dec_epoch"), (std::vector<int64_t>{17, 20}));
  config.set_yaml("model.weights", "", where);
  EXPECT_EQ(config.get_string("model.weights"), "");
  config.set_yaml("optim.nesterov", "true", where);
  EXPECT_TRUE(config.get_bool("optim.nesterov"));
  EXPECT_EQ(error_of([&] { config.set_yaml("optim.lr", "abc", SourceLoc{"--set optim.lr=abc"}); }),
            "--set optim.lr=abc: optim.lr must be a number, got \"abc\"");
  EXPECT_NE(error_of([&] { config.set_yaml("optim.lr", "[0.1", where); }).find("not valid YAML"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              config.set_yaml("schedule.epoch", "3", where);
            }).find("did you mean schedule.epochs?"),
            std::string::npos);
}

TEST(CoreConfig, NestedCanonicalJsonAndRoundTrip) {
  Config config;
  config.set("optim.lr", 0.1);
  config.set("schedule.lr_dec_epoch", nlohmann::json({17}));
  const nlohmann::json nested = config.nested();
  EXPECT_EQ(nested["optim"]["lr"], 0.1);
  EXPECT_EQ(nested["seed"], 0);
  const std::string canonical = config.canonical_json();
  EXPECT_NE(canonical.find("\"lr\":0.1,"), std::string::npos) << canonical;  // compact, stable
  EXPECT_NE(canonical.find("\"lr_dec_epoch\":[17]"), std::string::npos) << canonical;
  EXPECT_EQ(canonical.find(' '), std::string::npos) << "compact: " << canonical;
  // The identity: the canonical JSON without the keys that say how a run executes (schema
  // `identity: never`) and without later keys still at their defaults (`non_default`).
  nlohmann::json identity = nlohmann::json::parse(canonical);
  for (const auto& spec : Schema::builtin().keys()) {
    if (spec.identity == KeySpec::Identity::kAlways) continue;
    // The key's path (threads; optim.lr; amp.fp8.enabled), its groups left out once empty.
    std::vector<std::string> path;
    for (size_t from = 0, dot = 0; dot != std::string::npos; from = dot + 1) {
      dot = spec.key.find('.', from);
      path.push_back(spec.key.substr(from, dot == std::string::npos ? dot : dot - from));
    }
    std::vector<nlohmann::json*> groups{&identity};
    for (size_t i = 0; i + 1 < path.size() && groups.back()->contains(path[i]); ++i) {
      groups.push_back(&(*groups.back())[path[i]]);
    }
    if (groups.size() != path.size()) continue;
    groups.back()->erase(path.back());
    for (size_t i = groups.size() - 1; i > 0 && groups[i]->empty(); --i) {
      groups[i - 1]->erase(path[i - 1]);
    }
  }
  EXPECT_EQ(config.hash(), sha256_hex(identity.dump()));
  EXPECT_EQ(config.hash().size(), 64u);

  const Config back = Config::from_json(canonical, "db");
  EXPECT_EQ(back.canonical_json(), canonical);
  const Config flat =
      Config::from_json(R"({"optim.lr": 0.1, "schedule": {"lr_dec_epoch": [17]}})", "flat");
  EXPECT_EQ(flat.hash(), config.hash());  // missing keys take defaults
}

TEST(CoreConfig, FromJsonRejectsUnknownKeysAndBadValues) {
  EXPECT_NE(error_of([] {
              Config::from_json(R"({"optim": {"lrr": 1}})", "runs.config_json");
            }).find("runs.config_json: unknown config key optim.lrr"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Config::from_json(R"({"schedule": {"epochs": -1}})", "db");
            }).find("db: schedule.epochs must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { Config::from_json("{", "db"); }).find("db: config JSON does not parse"),
            std::string::npos);
  EXPECT_THROW(Config::from_json("[1]", "db"), ConfigError);
  EXPECT_THROW(Config::from_json(R"({"optim": 3})", "db"), ConfigError);
}

// The identity of a run must not drift between versions: the canonical text and hash of a fixed
// config over a fixed schema are pinned here. (The builtin schema grows as keys are added, which
// changes every run's hash on purpose; this test pins the format, not the key set.)
TEST(CoreConfig, HashOfAFixedConfigIsPinned) {
  static const Schema schema = Schema::parse(R"(
seed: {type: int, default: 0, doc: s}
optim.lr: {type: float, default: 0.1, doc: l}
optim.name: {type: string, default: sgd, choices: [sgd, adam], doc: n}
amp.loss_scale: {type: loss_scale, default: dynamic, doc: d}
schedule.lr_dec_epoch: {type: int_list, default: [17], doc: e}
data.mean: {type: float_list, default: [0.485, 0.456, 0.406], doc: m}
data.augment: {type: bool, default: true, doc: a}
)",
                                             "pinned");
  Config config(schema);
  EXPECT_EQ(config.canonical_json(),
            R"({"amp":{"loss_scale":"dynamic"},"data":{"augment":true,"mean":[0.485,0.456,0.406]},)"
            R"("optim":{"lr":0.1,"name":"sgd"},"schedule":{"lr_dec_epoch":[17]},"seed":0})");
  EXPECT_EQ(config.hash(), "af1668f9512b8719604b75e869b8239154ca50936d10ce6fc1a809eaa7681aa3");
  config.set("amp.loss_scale", 128);
  config.set("optim.lr", 1e-8);
  EXPECT_EQ(config.canonical_json(),
            R"({"amp":{"loss_scale":128.0},"data":{"augment":true,"mean":[0.485,0.456,0.406]},)"
            R"("optim":{"lr":1e-08,"name":"sgd"},"schedule":{"lr_dec_epoch":[17]},"seed":0})");
}

// Schema `identity`: keys that say how a run executes stay out of its hash; keys added later
// enter it only when set, so the runs of existing databases keep their hashes.
TEST(CoreConfig, IdentityLeavesExecutionKeysOutOfTheHash) {
  static const Schema before = Schema::parse("seed: {type: int, default: 0, doc: s}\n", "before");
  static const Schema after = Schema::parse(R"(
seed: {type: int, default: 0, doc: s}
dist.timeout_s: {type: float, default: 300, identity: never, doc: t}
dist.sync_bn: {type: bool, default: false, identity: non_default, doc: b}
)",
                                            "after");
  Config old_run(before), run(after);
  EXPECT_EQ(run.hash(), old_run.hash());  // the new keys at their defaults: same identity
  EXPECT_NE(run.canonical_json(), old_run.canonical_json());  // but stored with the run
  run.set("dist.timeout_s", 5.0);
  EXPECT_EQ(run.hash(), old_run.hash());
  run.set("dist.sync_bn", true);
  EXPECT_NE(run.hash(), old_run.hash());
  run.set("dist.sync_bn", false);
  EXPECT_EQ(run.hash(), old_run.hash());
  EXPECT_THROW(Schema::parse("a: {type: int, default: 0, identity: sometimes, doc: a}", "x"),
               ConfigError);
}

// `identity: content`: a path's value stays out of the hash (its contents enter the run's
// identity through run_identity); only string keys take it.
TEST(CoreConfig, ContentKeysLeaveTheirPathOutAndRunIdentityTakesTheData) {
  static const Schema schema = Schema::parse(R"(
seed: {type: int, default: 0, doc: s}
data.root: {type: string, default: data, identity: content, doc: r}
)",
                                             "content");
  Config here(schema), there(schema);
  there.set("data.root", "/scratch/copy");
  EXPECT_EQ(here.hash(), there.hash());
  EXPECT_EQ(run_identity(here.hash(), ""), here.hash());  // no fingerprint: the config hash
  EXPECT_EQ(run_identity(here.hash(), "fp"), run_identity(there.hash(), "fp"));
  EXPECT_NE(run_identity(here.hash(), "fp"), run_identity(here.hash(), "other data"));
  EXPECT_NE(run_identity(here.hash(), "fp"), here.hash());
  // A fork: parent, epoch, reset and other data each make another fork.
  const std::string fork = fork_identity(here.hash(), "parent", 3, false);
  EXPECT_NE(fork, fork_identity(here.hash(), "other parent", 3, false));
  EXPECT_NE(fork, fork_identity(here.hash(), "parent", 4, false));
  EXPECT_NE(fork, fork_identity(here.hash(), "parent", 3, true));
  EXPECT_NE(fork, fork_identity(here.hash(), "parent", 3, false, "other data"));
  EXPECT_THROW(Schema::parse("a: {type: int, default: 0, identity: content, doc: a}", "x"),
               ConfigError);
}

// A different valid value for `spec`, or null when none of the candidates is accepted.
nlohmann::json other_value(const Config& config, const KeySpec& spec) {
  const nlohmann::json& d = spec.default_value;
  std::vector<nlohmann::json> candidates;
  if (spec.type == "int") {
    candidates = {d.get<int64_t>() + 1, d.get<int64_t>() - 1};
  } else if (spec.type == "float") {
    const double v = d.get<double>();
    candidates = {v / 2, v + 0.5, v + 1};
    if (spec.min) candidates.push_back(*spec.min);
  } else if (spec.type == "bool") {
    candidates = {!d.get<bool>()};
  } else if (spec.type == "string") {
    for (const auto& c : spec.choices) candidates.push_back(c);
    candidates.push_back(d.get<std::string>() + "x");
  } else if (spec.type == "loss_scale") {
    candidates = {"dynamic", 128.0};
  } else {  // lists
    nlohmann::json shorter = d;
    if (!shorter.empty()) shorter.erase(shorter.size() - 1);
    candidates = {shorter};
    if (spec.type == "int_list") candidates.push_back(nlohmann::json({3}));
    if (spec.type == "float_list") candidates.push_back(nlohmann::json({0.5}));
    if (spec.type == "string_list") {
      candidates.push_back(nlohmann::json({spec.choices.empty() ? "x" : spec.choices.front()}));
    }
  }
  for (const auto& c : candidates) {
    Config probe = config;
    try {
      probe.set(spec.key, c);
    } catch (const ConfigError&) {
      continue;
    }
    if (probe.at(spec.key) != d) return probe.at(spec.key);
  }
  return nullptr;
}

TEST(CoreConfig, HashChangesWhenAnyValueChanges) {
  const Config base;
  const std::string base_hash = base.hash();
  std::set<std::string> seen{base_hash};
  for (const auto& spec : Schema::builtin().keys()) {
    const nlohmann::json other = other_value(base, spec);
    ASSERT_FALSE(other.is_null()) << "no alternative value for " << spec.key;
    Config changed = base;
    changed.set(spec.key, other);
    if (spec.identity == KeySpec::Identity::kNever ||
        spec.identity == KeySpec::Identity::kContent) {  // how or where it executes: same run
      EXPECT_EQ(changed.hash(), base_hash) << spec.key << " = " << other.dump();
      continue;
    }
    EXPECT_TRUE(seen.insert(changed.hash()).second) << spec.key << " = " << other.dump();
  }
}

// The sweep's fast path: hashes spliced from a template equal hash() for every value.
TEST(CoreConfig, HashTemplateGivesHashOfEveryValue) {
  Config config;
  config.set("model.name", "resnet18");
  const std::vector<std::string> keys = {"optim.lr", "seed", "model.name", "casts.int32",
                                         "checkpoint.dir", "data.root", "amp.loss_scale"};
  const std::optional<HashTemplate> t = config.hash_template(keys);
  ASSERT_TRUE(t);
  const std::vector<std::vector<nlohmann::json>> rows = {
      {0.1, 0, "resnet18", nlohmann::json::array(), "", "data", "dynamic"},
      {1e-8, 7, "resnet50 \"quoted\" \u00e9", {"k_value", "bbox"}, "/x", "/y", 128.0},
      {2.5, 123456789, "rootnet", {"cam_param"}, "a\nb", "c", "dynamic"}};
  std::set<std::string> seen;
  for (const auto& row : rows) {
    std::vector<const nlohmann::json*> values;
    for (size_t k = 0; k < keys.size(); ++k) {
      config.set(keys[k], row[k]);
      values.push_back(&config.at(keys[k]));
    }
    EXPECT_EQ(t->hash(values), config.hash()) << nlohmann::json(row).dump();
    seen.insert(t->hash(values));
  }
  EXPECT_EQ(seen.size(), rows.size());
  // A non_default key's presence depends on its value: no template.
  EXPECT_FALSE(config.hash_template({"optim.lr", "amp.fp32_modules"}));
}

// Integer keys hold counts, epochs and sizes the code keeps in 32 bits; loader and image sizes
// have upper bounds.
TEST(CoreConfig, IntegersAreBoundedAndSizesHaveMaxima) {
  Config config;
  EXPECT_NE(error_of([&] { config.set_yaml("schedule.epochs", "2147483648", SourceLoc{"x.yaml", 3, 5}); })
                .find("x.yaml:3:5: schedule.epochs is out of the 32-bit integer range"),
            std::string::npos);
  config.set_yaml("seed", "2147483647", SourceLoc{});  // 32 bits; the seed has no maximum
  EXPECT_NE(error_of([&] { config.set_yaml("data.workers", "100000", SourceLoc{}); })
                .find("data.workers must be <= 256"),
            std::string::npos);
  EXPECT_NE(error_of([&] { config.set_yaml("data.image_size", "1000000", SourceLoc{}); })
                .find("data.image_size must be <= 8192"),
            std::string::npos);
  EXPECT_NE(error_of([&] { config.set_yaml("schedule.lr_dec_epoch", "[1, 9999999999]", SourceLoc{}); })
                .find("out of the 32-bit integer range"),
            std::string::npos);
}

TEST(CoreConfig, SpellingOfANumberDoesNotChangeTheHash) {
  Config a, b, c;
  a.set_yaml("optim.lr", "1", SourceLoc{});
  b.set_yaml("optim.lr", "1.0", SourceLoc{});
  c.set_yaml("optim.lr", "1e0", SourceLoc{});
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash(), c.hash());
}

TEST(CoreConfig, SplitAssignment) {
  EXPECT_EQ(split_assignment("optim.lr=0.05"),
            std::make_pair(std::string("optim.lr"), std::string("0.05")));
  EXPECT_EQ(split_assignment(" a.b =x=y").first, "a.b");
  EXPECT_EQ(split_assignment(" a.b =x=y").second, "x=y");
  EXPECT_EQ(split_assignment("model.weights=").second, "");
  EXPECT_THROW(split_assignment("optim.lr"), UsageError);
  EXPECT_THROW(split_assignment("=3"), UsageError);
}

}  // namespace
}  // namespace amptune
