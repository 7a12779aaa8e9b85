#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/config.h"
#include "core/embedded.h"
#include "core/error.h"

namespace amptune {
namespace {

// A schema written for these tests, so typing rules are checked independently of the keys that
// schemas/config.yaml happens to hold today.
const char* kTestSchema = R"(
n.count:
  type: int
  default: 2
  min: 1
  max: 10
  doc: An int.
n.rate:
  type: float
  default: 0.5
  min: 0
  doc: A float.
n.flag:
  type: bool
  default: false
  doc: A bool.
n.word:
  type: string
  default: abc
  doc: A string.
n.pick:
  type: string
  default: sgd
  choices: [sgd, adam]
  doc: A choice.
n.ints:
  type: int_list
  default: []
  min: 0
  doc: Ints.
n.floats:
  type: float_list
  default: [0.1, 1]
  max: 1
  doc: Floats.
n.words:
  type: string_list
  default: [a]
  choices: [a, b]
  doc: Words.
n.scale:
  type: loss_scale
  default: dynamic
  doc: A loss scale.
n.scale_or_auto:
  type: loss_scale
  default: auto
  choices: [auto]
  doc: A loss scale with an extra word (amp.loss_scale).
)";

const Schema& test_schema() {
  static const Schema schema = Schema::parse(kTestSchema, "test_schema.yaml");
  return schema;
}

nlohmann::json coerce_text(const std::string& key, const std::string& yaml) {
  const Schema& s = test_schema();
  return s.coerce(*s.find(key), YAML::Load(yaml), SourceLoc{"t.yaml", 3, 7});
}

std::string coerce_error(const std::string& key, const std::string& yaml) {
  try {
    coerce_text(key, yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << key << " accepted " << yaml;
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CoreSchema, BuiltinHoldsEveryKeyOfTheSchemaFileWithAValidDefault) {
  const std::string path = std::string(AMPTUNE_SOURCE_DIR) + "/schemas/config.yaml";
  const YAML::Node file = YAML::LoadFile(path);
  const Schema& schema = Schema::builtin();
  ASSERT_EQ(schema.keys().size(), file.size());
  for (const auto& entry : file) {
    const std::string key = entry.first.Scalar();
    const KeySpec* spec = schema.find(key);
    ASSERT_NE(spec, nullptr) << key;
    EXPECT_FALSE(spec->doc.empty()) << key;
    EXPECT_EQ(spec->type, entry.second["type"].Scalar()) << key;
    // The stored default is already normal: coercing it again changes nothing.
    EXPECT_EQ(schema.coerce(*spec, spec->default_value, SourceLoc{}), spec->default_value) << key;
    EXPECT_EQ(schema.coerce(*spec, entry.second["default"], SourceLoc{}), spec->default_value)
        << key;
  }
  EXPECT_EQ(std::string(embedded::config_yaml), read_file(path))
      << "the compiled-in schema is stale: re-run cmake";
}

TEST(CoreSchema, IntTyping) {
  EXPECT_EQ(coerce_text("n.count", "3"), nlohmann::json(3));
  EXPECT_TRUE(coerce_text("n.count", "3").is_number_integer());
  EXPECT_NE(coerce_error("n.count", "3.0").find("n.count must be an integer, got 3.0"),
            std::string::npos);
  EXPECT_NE(coerce_error("n.count", "abc").find("got \"abc\""), std::string::npos);
  EXPECT_NE(coerce_error("n.count", "'3'").find("must be an integer"), std::string::npos);
  EXPECT_NE(coerce_error("n.count", "true").find("must be an integer"), std::string::npos);
  EXPECT_NE(coerce_error("n.count", "99999999999999999999").find("32-bit"), std::string::npos);
  EXPECT_NE(coerce_error("n.count", "[1]").find("must be a single value"), std::string::npos);
  EXPECT_NE(coerce_error("n.count", "~").find("needs a value"), std::string::npos);
}

TEST(CoreSchema, FloatTyping) {
  EXPECT_EQ(coerce_text("n.rate", "1e-8"), nlohmann::json(1e-8));
  EXPECT_EQ(coerce_text("n.rate", "0.1"), nlohmann::json(0.1));
  const auto from_int = coerce_text("n.rate", "2");
  EXPECT_TRUE(from_int.is_number_float());  // so "2" and "2.0" hash the same
  EXPECT_EQ(from_int.dump(), "2.0");
  EXPECT_EQ(coerce_text("n.rate", ".5"), nlohmann::json(0.5));
  EXPECT_NE(coerce_error("n.rate", "yes").find("must be a number"), std::string::npos);
  EXPECT_NE(coerce_error("n.rate", ".inf").find("finite"), std::string::npos);
  EXPECT_NE(coerce_error("n.rate", "\"0.1\"").find("must be a number"), std::string::npos);
}

TEST(CoreSchema, BoolAndStringTyping) {
  EXPECT_EQ(coerce_text("n.flag", "true"), nlohmann::json(true));
  EXPECT_EQ(coerce_text("n.flag", "false"), nlohmann::json(false));
  for (const char* bad : {"yes", "on", "1", "'true'"}) {
    EXPECT_NE(coerce_error("n.flag", bad).find("must be true or false"), std::string::npos) << bad;
  }
  EXPECT_EQ(coerce_text("n.word", "hello"), nlohmann::json("hello"));
  EXPECT_EQ(coerce_text("n.word", "'123'"), nlohmann::json("123"));
  EXPECT_EQ(coerce_text("n.word", "2017"), nlohmann::json("2017"));  // plain text as written
  EXPECT_EQ(coerce_text("n.word", "''"), nlohmann::json(""));
  EXPECT_NE(coerce_error("n.word", "~").find("write \"\""), std::string::npos);
}

TEST(CoreSchema, ListTyping) {
  EXPECT_EQ(coerce_text("n.ints", "[17, 20]"), nlohmann::json({17, 20}));
  EXPECT_EQ(coerce_text("n.ints", "[]"), nlohmann::json::array());
  EXPECT_EQ(coerce_text("n.floats", "[1, 0.25]").dump(), "[1.0,0.25]");
  EXPECT_EQ(coerce_text("n.words", "[a, b]"), nlohmann::json({"a", "b"}));
  const std::string scalar = coerce_error("n.ints", "17");
  EXPECT_NE(scalar.find("t.yaml:3:7: n.ints must be a list"), std::string::npos) << scalar;
  EXPECT_NE(coerce_error("n.ints", "[1, -1]").find("n.ints[1] must be >= 0, got -1"),
            std::string::npos);
  EXPECT_NE(coerce_error("n.floats", "[0.5, 1.5]").find("n.floats[1] must be <= 1, got 1.5"),
            std::string::npos);
  EXPECT_NE(coerce_error("n.words", "[a, c]").find("must be one of a, b, got \"c\""),
            std::string::npos);
  EXPECT_NE(coerce_error("n.ints", "[[1]]").find("n.ints[0] must be a single value"),
            std::string::npos);
}

TEST(CoreSchema, LossScaleTyping) {
  EXPECT_EQ(coerce_text("n.scale", "dynamic"), nlohmann::json("dynamic"));
  EXPECT_EQ(coerce_text("n.scale", "-1"), nlohmann::json("dynamic"));
  EXPECT_EQ(coerce_text("n.scale", "-1.0"), nlohmann::json("dynamic"));
  EXPECT_EQ(coerce_text("n.scale", "128").dump(), "128.0");
  EXPECT_EQ(coerce_text("n.scale", "0.5"), nlohmann::json(0.5));
  for (const char* bad : {"0", "-2", "static", "true"}) {
    EXPECT_NE(coerce_error("n.scale", bad).find("must be \"dynamic\", -1 (dynamic) or a positive"),
              std::string::npos)
        << bad;
  }
  const Schema& s = test_schema();
  EXPECT_EQ(s.coerce(*s.find("n.scale"), nlohmann::json(-1), SourceLoc{}), "dynamic");
  EXPECT_EQ(s.coerce(*s.find("n.scale"), nlohmann::json(64), SourceLoc{}).dump(), "64.0");
}

TEST(CoreSchema, LossScaleChoicesAddWords) {
  EXPECT_EQ(coerce_text("n.scale_or_auto", "auto"), nlohmann::json("auto"));
  EXPECT_EQ(coerce_text("n.scale_or_auto", "dynamic"), nlohmann::json("dynamic"));
  EXPECT_EQ(coerce_text("n.scale_or_auto", "-1"), nlohmann::json("dynamic"));
  EXPECT_EQ(coerce_text("n.scale_or_auto", "128").dump(), "128.0");
  EXPECT_NE(coerce_error("n.scale_or_auto", "static")
                .find("must be \"dynamic\", -1 (dynamic), \"auto\" or a positive number"),
            std::string::npos);
  // Without choices the extra word is refused.
  EXPECT_NE(coerce_error("n.scale", "auto").find("must be \"dynamic\""), std::string::npos);
  const Schema& s = test_schema();
  EXPECT_EQ(s.coerce(*s.find("n.scale_or_auto"), nlohmann::json("auto"), SourceLoc{}), "auto");
}

TEST(CoreSchema, ErrorMessagesNameWhereKeyAndValue) {
  const Schema& schema = Schema::builtin();
  const SourceLoc where{"experiments/x.yaml", 12, 5};
  try {
    schema.coerce(*schema.find("schedule.epochs"), YAML::Load("-1"), where);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "experiments/x.yaml:12:5: schedule.epochs must be >= 0, got -1");
  }
  try {
    schema.coerce(*schema.find("optim.name"), YAML::Load("adamw"), where);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "experiments/x.yaml:12:5: optim.name must be one of sgd, adam, got "
                 "\"adamw\"");
  }
}

TEST(CoreSchema, JsonCoercionIsStrictAboutTypes) {
  const Schema& s = test_schema();
  EXPECT_EQ(s.coerce(*s.find("n.rate"), nlohmann::json(1), SourceLoc{}).dump(), "1.0");
  EXPECT_THROW(s.coerce(*s.find("n.count"), nlohmann::json(1.5), SourceLoc{}), ConfigError);
  EXPECT_THROW(s.coerce(*s.find("n.word"), nlohmann::json(5), SourceLoc{}), ConfigError);
  EXPECT_THROW(s.coerce(*s.find("n.ints"), nlohmann::json(5), SourceLoc{}), ConfigError);
  EXPECT_THROW(s.coerce(*s.find("n.flag"), nlohmann::json("true"), SourceLoc{}), ConfigError);
}

TEST(CoreSchema, SuggestsCloseKeys) {
  const Schema& schema = Schema::builtin();
  EXPECT_EQ(schema.suggest("optim.lrr"), "optim.lr");
  EXPECT_EQ(schema.suggest("optim.rl"), "optim.lr");
  EXPECT_EQ(schema.suggest("schedule.epoch"), "schedule.epochs");
  EXPECT_EQ(schema.suggest("epochs"), "schedule.epochs");        // last component
  EXPECT_EQ(schema.suggest("optim.epochs"), "schedule.epochs");  // same leaf, other group
  EXPECT_EQ(schema.suggest("data.batchsize"), "data.batch_size");
  EXPECT_EQ(schema.suggest("optim.learning_rate"), "");
  EXPECT_EQ(schema.suggest("zzzzzz"), "");
  EXPECT_EQ(suggest_among("gird", {"name", "grid", "zip"}), "grid");
  const std::string message = schema.unknown_key_message("optim.lrr", "in base");
  EXPECT_NE(message.find("unknown config key optim.lrr (in base); did you mean optim.lr?"),
            std::string::npos)
      << message;
}

std::string parse_error(const std::string& text) {
  try {
    Schema::parse(text, "bad.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

TEST(CoreSchema, RejectsMalformedSchemaEntries) {
  EXPECT_NE(parse_error("a.b:\n  type: decimal\n  default: 1\n  doc: x\n").find("bad.yaml:1:1"),
            std::string::npos);
  EXPECT_NE(parse_error("a.b:\n  type: int\n  default: 0\n  min: 1\n  doc: x\n")
                .find("bad.yaml:3:12: a.b must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(parse_error("a.b:\n  type: int\n  default: 0\n").find("lacks `doc`"),
            std::string::npos);
  EXPECT_NE(parse_error("a.b:\n  type: int\n  default: 0\n  doc: x\n  unit: s\n")
                .find("bad.yaml:5:3: schema entry a.b has an unknown field unit"),
            std::string::npos);
  EXPECT_NE(parse_error("a:\n  type: int\n  default: 0\n  doc: x\na.b:\n  type: int\n"
                        "  default: 0\n  doc: x\n")
                .find("both a key and a group"),
            std::string::npos);
  EXPECT_NE(
      parse_error("a.b:\n  type: int\n  default: 0\n  choices: [x]\n  doc: x\n").find("choices"),
      std::string::npos);
  EXPECT_NE(parse_error("a.b: [1, 2\n").find("YAML syntax error"), std::string::npos);
}

}  // namespace
}  // namespace amptune
