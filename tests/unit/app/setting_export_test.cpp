// The exported setting (app/artifacts/setting_export.h) on hand-made run rows: its values from
// the run's amp.* keys as amp's policy reads them (O0-O3, static and dynamic scales, bounds, fp32
// modules, int32 cast points), the Python literals of hostile text (quotes, line breaks, U+2028,
// invalid UTF-8), the refusals (globs Python's fnmatch would read otherwise, unknown cast points,
// a tune search without an answer), and the JSON form. Python itself runs the generated module in
// tests/integration/setting_test.cpp.
#include "app/artifacts/setting_export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "amp/scaler.h"
#include "app/artifacts/python_literal.h"
#include "core/error.h"
#include "support/tiny_config.h"

namespace amptune::app {
namespace {

records::RunRow run_row(const std::vector<std::pair<std::string, nlohmann::json>>& amp,
                        const std::string& name = "sw/1-abcdef12") {
  Config c = testing::tiny_config();
  for (const auto& [key, value] : amp) c.set(key, value);
  records::RunRow row;
  row.id = 7;
  row.name = name;
  row.sweep_name = "sw";
  row.status = records::RunStatus::kDone;
  row.config_json = c.canonical_json();
  row.config_hash = c.hash();
  return row;
}

const SettingSource kSource{"results/db.sqlite", "amptune 9.9 (test)", "export-setting"};

ExportedSetting setting(const std::vector<std::pair<std::string, nlohmann::json>>& amp) {
  return setting_of(run_row(amp), kSource);
}

// The part of a generated module before its imports: comments only.
void expect_header_is_comments(const std::string& py) {
  const size_t imports = py.find("\nimport contextlib\n");
  ASSERT_NE(imports, std::string::npos);
  size_t at = 0;
  while (at < imports) {
    const size_t end = py.find('\n', at);
    const std::string line = py.substr(at, end - at);
    EXPECT_TRUE(line.empty() || line[0] == '#') << "not a comment: " << line;
    at = end + 1;
  }
}

TEST(AppSettingExport, PythonStringsAreOneLineOfPrintableAscii) {
  EXPECT_EQ(python_string("conv1", "x"), "\"conv1\"");
  EXPECT_EQ(python_string("a\"b\\c'd", "x"), R"("a\"b\\c'd")");
  EXPECT_EQ(python_string("x\ny\r\tz", "x"), R"("x\x0ay\x0d\x09z")");
  EXPECT_EQ(python_string(std::string("n\0l", 3), "x"), R"("n\x00l")");
  EXPECT_EQ(python_string("caf\xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x98\x80 \x7f", "x"),
            R"("caf\xe9 \u2028 \U0001f600 \x7f")");
  // A closing triple quote, a comment sign or a line break inside cannot end the literal.
  EXPECT_EQ(python_string("\"\"\"\n#", "x"), R"("\"\"\"\x0a#")");
  try {
    (void)python_string("bad \xc3(", "run 7's name");
    ADD_FAILURE() << "invalid UTF-8 was quoted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run 7's name is not valid UTF-8"), std::string::npos);
  }
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // an overlong '/'
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_TRUE(valid_utf8("\xf4\x8f\xbf\xbf"));
}

TEST(AppSettingExport, PythonFloatsRoundTripAndRefuseNonFinite) {
  EXPECT_EQ(python_float(1024, "x"), "1024.0");
  EXPECT_EQ(python_float(0.1, "x"), "0.1");
  EXPECT_EQ(python_float(-2.5, "x"), "-2.5");
  EXPECT_EQ(python_float(1e20, "x"), "1e+20");
  EXPECT_EQ(python_float(std::ldexp(1.0, -24), "x"), "5.960464477539063e-08");
  EXPECT_THROW(python_float(std::numeric_limits<double>::quiet_NaN(), "x"), ConfigError);
  EXPECT_THROW(python_float(std::numeric_limits<double>::infinity(), "x"), ConfigError);
  EXPECT_EQ(python_int(-3), "-3");
  EXPECT_EQ(python_bool(true), "True");
}

TEST(AppSettingExport, ScaleFactorsAreTheLossScalersOwn) {
  const amp::ScalerOptions apex;
  EXPECT_EQ(kScaleGrowthFactor, apex.growth_factor);
  EXPECT_EQ(kScaleBackoffFactor, apex.backoff_factor);
}

TEST(AppSettingExport, ValuesComeFromTheRunsAmpKeysAsThePolicyReadsThem) {
  const ExportedSetting o1 = setting({{"amp.opt_level", "O1"},
                                      {"amp.loss_scale", "dynamic"},
                                      {"amp.max_loss_scale", 1024.0},
                                      {"amp.fp32_modules", {"conv1", "layer2.*"}}});
  EXPECT_EQ(o1.run_id, 7);
  EXPECT_EQ(o1.run_name, "sw/1-abcdef12");
  EXPECT_EQ(o1.run_status, "done");
  EXPECT_EQ(o1.model, "resnet18");
  EXPECT_EQ(o1.opt_level, OptLevel::kO1);
  ASSERT_TRUE(o1.dtype);
  EXPECT_EQ(*o1.dtype, Dtype::kFp16);
  EXPECT_TRUE(o1.autocast);
  EXPECT_FALSE(o1.cast_model);
  EXPECT_TRUE(o1.dynamic_scale);
  EXPECT_EQ(o1.init_scale, 1024.0);  // apex: min(2^16, max_loss_scale)
  EXPECT_EQ(o1.max_scale, 1024.0);
  EXPECT_EQ(o1.growth_interval, 2000);
  EXPECT_EQ(o1.fp32_modules, (std::vector<std::string>{"conv1", "layer2.*"}));

  const ExportedSetting o2 = setting({{"amp.opt_level", "O2"}, {"amp.dtype", "bf16"}});
  EXPECT_TRUE(o2.cast_model);
  EXPECT_TRUE(o2.keep_batchnorm_fp32);
  EXPECT_TRUE(o2.master_weights);
  EXPECT_FALSE(o2.autocast);
  EXPECT_EQ(*o2.dtype, Dtype::kBf16);
  EXPECT_TRUE(o2.dynamic_scale);
  EXPECT_EQ(o2.init_scale, 65536.0);

  const ExportedSetting o3 = setting({{"amp.opt_level", "O3"}, {"amp.min_loss_scale", 2.0}});
  EXPECT_TRUE(o3.cast_model);
  EXPECT_FALSE(o3.keep_batchnorm_fp32);
  EXPECT_FALSE(o3.master_weights);
  EXPECT_FALSE(o3.dynamic_scale);  // apex's O3 default: a static 1.0
  EXPECT_EQ(o3.static_scale, 1.0);

  const ExportedSetting fixed = setting({{"amp.opt_level", "O1"}, {"amp.loss_scale", 128.0}});
  EXPECT_FALSE(fixed.dynamic_scale);
  EXPECT_EQ(fixed.static_scale, 128.0);

  const ExportedSetting o0 = setting({});
  EXPECT_EQ(o0.opt_level, OptLevel::kO0);
  EXPECT_FALSE(o0.dtype);
  EXPECT_FALSE(o0.autocast || o0.cast_model);
}

TEST(AppSettingExport, ApexRefusalsNameTheRun) {
  try {
    (void)setting({{"amp.opt_level", "O1"}, {"amp.master_weights", "true"}});
    ADD_FAILURE() << "O1 with master_weights was exported";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run 7 (sw/1-abcdef12): "), std::string::npos) << e.what();
  }
}

TEST(AppSettingExport, PythonModuleHoldsTheValuesAsLiterals) {
  const std::string py = setting_python(setting({{"amp.opt_level", "O1"},
                                                 {"amp.loss_scale", "dynamic"},
                                                 {"amp.max_loss_scale", 1024.0},
                                                 {"amp.min_loss_scale", 4.0},
                                                 {"amp.fp32_modules", {"conv1"}}}));
  EXPECT_EQ(py.rfind("# -*- coding: utf-8 -*-\n", 0), 0u) << "line 1 fixes the encoding";
  expect_header_is_comments(py);
  for (const char* want :
       {"    \"opt_level\": \"O1\",\n", "    \"dtype\": \"float16\",\n",
        "    \"autocast\": True,\n", "    \"cast_model\": False,\n",
        "        \"init_scale\": 1024.0,\n", "        \"growth_factor\": 2.0,\n",
        "        \"backoff_factor\": 0.5,\n", "        \"growth_interval\": 2000,\n",
        "        \"min_scale\": 4.0,\n", "        \"max_scale\": 1024.0,\n",
        "    \"fp32_modules\": [\"conv1\"],\n", "TUNE = None\n", "    \"run_id\": 7,\n",
        "    \"database\": \"results/db.sqlite\",\n",
        "# Kept in fp32 (amp.fp32_modules): \"conv1\",\n", "\ndef apply(model, "}) {
    EXPECT_NE(py.find(want), std::string::npos) << want;
  }
  for (char c : py) {
    EXPECT_TRUE(c == '\n' || (c >= 0x20 && c <= 0x7e)) << "byte " << static_cast<int>(c);
  }
}

TEST(AppSettingExport, HostileTextStaysInsideItsLiteral) {
  // A run name, a database path and a glob from a database someone else wrote.
  records::RunRow row =
      run_row({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1\"]\nimport os #", "a'b"}}},
              "sw/1\n\"\"\"\nimport os\n\xe2\x80\xa8x");
  row.sweep_name = "s\r\nw";
  // A line break in a glob: no module name holds one, refused.
  EXPECT_THROW(setting_of(row, kSource), ConfigError);
  row = run_row({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1\"]; import os #", "a'b"}}},
                "sw/1\n\"\"\"\nimport os\n\xe2\x80\xa8x");
  const SettingSource source{"dir\n# \"evil.sqlite", kSource.generator, kSource.command};
  const std::string py = setting_python(setting_of(row, source));
  expect_header_is_comments(py);
  EXPECT_NE(py.find(R"("fp32_modules": ["conv1\"]; import os #", "a'b"])"), std::string::npos)
      << py;
  EXPECT_NE(py.find(R"("run_name": "sw/1\x0a\"\"\"\x0aimport os\x0a\u2028x",)"), std::string::npos);
  EXPECT_NE(py.find(R"("database": "dir\x0a# \"evil.sqlite",)"), std::string::npos);
  EXPECT_EQ(py.find("\nimport os"), std::string::npos);

  row.name = "bad \xff name";
  EXPECT_THROW(setting_of(row, kSource), ConfigError);
}

TEST(AppSettingExport, RefusesGlobsPythonWouldMatchOtherwise) {
  for (const std::string glob : {"layer\\.1", "layer[^0]", "conv[[:digit:]]", "conv\t1"}) {
    try {
      (void)setting({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {glob}}});
      ADD_FAILURE() << glob << " was exported";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("amp.fp32_modules entry"), std::string::npos)
          << e.what();
    }
  }
  // '*', '?', sets and negated sets with '!' mean the same to both.
  EXPECT_EQ(setting({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"layer[!1].*", "fc?"}}})
                .fp32_modules.size(),
            2u);
}

TEST(AppSettingExport, Int32CastPointsAreNamedWithWhereTheyApply) {
  records::RunRow row = run_row({{"amp.opt_level", "O2"}});
  Config c = Config::from_json(row.config_json, "test");
  c.set("model.name", "rootnet");
  c.set("casts.int32", nlohmann::json{"k_value", "cam_param"});
  row.config_json = c.canonical_json();
  const ExportedSetting s = setting_of(row, kSource);
  EXPECT_EQ(s.int32_casts, (std::vector<std::string>{"k_value", "cam_param"}));
  const std::string py = setting_python(s);
  EXPECT_NE(py.find("#   k_value (batch field k_value, training): the training batch's k value, "
                    "before the model\n"),
            std::string::npos)
      << py;
  EXPECT_NE(py.find("#   cam_param (batch field k_value, test): the test-time k value"),
            std::string::npos);
  const nlohmann::json doc = nlohmann::json::parse(setting_json(s));
  EXPECT_EQ(doc["setting"]["int32_casts"][1]["side"], "test");

  // A name this build does not know (a database of another build): refused.
  nlohmann::json stored = nlohmann::json::parse(row.config_json);
  stored["casts"]["int32"] = {"k_value", "nope"};
  row.config_json = stored.dump();
  EXPECT_THROW(setting_of(row, kSource), ConfigError);
}

TEST(AppSettingExport, JsonIsTheSameSettingAsData) {
  const ExportedSetting s = setting(
      {{"amp.opt_level", "O1"}, {"amp.loss_scale", 128.0}, {"amp.fp32_modules", {"caf\xc3\xa9"}}});
  const std::string text = setting_json(s);
  for (char c : text) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c <= 0x7e));
  const nlohmann::json doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["format"], "amptune-setting");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["source"]["run_id"], 7);
  EXPECT_TRUE(doc["tune"].is_null());
  EXPECT_EQ(doc["setting"]["loss_scale"], (nlohmann::json{{"dynamic", false}, {"scale", 128.0}}));
  EXPECT_EQ(doc["setting"]["fp32_modules"][0], "caf\xc3\xa9");
  EXPECT_EQ(doc["setting"]["dtype"], "float16");
  EXPECT_EQ(parse_setting_format("json", "--format"), SettingFormat::kJson);
  EXPECT_THROW(parse_setting_format("yaml", "--format"), UsageError);
}

TEST(AppSettingExport, AnFp8RecipeIsDataAndATransformerEngineRecipe) {
  EXPECT_FALSE(setting({{"amp.opt_level", "O1"}}).fp8.has_value());
  EXPECT_TRUE(nlohmann::json::parse(setting_json(setting({})))["setting"]["fp8"].is_null());
  const ExportedSetting s = setting({{"amp.opt_level", "O1"},
                                     {"amp.dtype", "bf16"},
                                     {"amp.fp8.enabled", true},
                                     {"amp.fp8.format", "e4m3"},
                                     {"amp.fp8.recipe", "current"},
                                     {"amp.fp8.margin", 2},
                                     {"amp.fp8.skip_modules", {"fc", "layer1.*"}}});
  ASSERT_TRUE(s.fp8.has_value());
  const nlohmann::json fp8 = nlohmann::json::parse(setting_json(s))["setting"]["fp8"];
  EXPECT_EQ(fp8, (nlohmann::json{{"format", "e4m3"},
                                 {"recipe", "current"},
                                 {"margin", 2},
                                 {"amax_history_len", 1024},
                                 {"amax_compute", "max"},
                                 {"skip_modules", {"fc", "layer1.*"}}}));
  const std::string py = setting_python(s);
  expect_header_is_comments(py);
  EXPECT_NE(py.find("# FP8 (amp.fp8.*): format e4m3, current scaling (margin 2), kept out of "
                    "FP8: \"fc\", \"layer1.*\""),
            std::string::npos);
  EXPECT_NE(py.find("def fp8_recipe():"), std::string::npos);
  EXPECT_NE(py.find("\"fp8\": {"), std::string::npos);
  // A skip glob Python's fnmatch would read otherwise is refused as an fp32 glob is.
  EXPECT_THROW(setting({{"amp.opt_level", "O1"},
                        {"amp.dtype", "bf16"},
                        {"amp.fp8.enabled", true},
                        {"amp.fp8.skip_modules", {"layer[^1]"}}}),
               ConfigError);
}

TEST(AppSettingExport, TuneAnswerCarriesTheSearchOrIsRefused) {
  TuneOutcome out;
  out.search.sweep_name = "sw";
  out.search.status = records::TuneStatus::kExhausted;
  out.search.note = "budget spent";
  try {
    (void)export_tune_answer(out, kSource);
    ADD_FAILURE() << "an exhausted search was exported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kFailedRuns);
    EXPECT_NE(std::string(e.what()).find("has no answer to write (exhausted: budget spent)"),
              std::string::npos)
        << e.what();
  }
  out.search.status = records::TuneStatus::kAnswered;
  out.search.answer_run_id = 7;
  out.search.reference_run_id = 3;
  out.search.metric = "train_loss";
  out.search.higher_is_better = false;
  out.search.answer_value = 0.25;
  out.search.reference_value = 0.2;
  out.search.block_json = R"({"tune.tolerance.abs": 0.1, "tune.tolerance.rel": 0})";
  out.runs[7] = run_row({{"amp.opt_level", "O1"}, {"amp.fp32_modules", {"conv1"}}});
  out.runs[3] = run_row({}, "sw/0-00000000");
  const ExportedSetting s = export_tune_answer(out, kSource);
  ASSERT_TRUE(s.tune);
  EXPECT_EQ(s.tune->tolerance_abs, 0.1);
  EXPECT_EQ(s.tune->reference_run, "sw/0-00000000");
  const nlohmann::json doc = nlohmann::json::parse(setting_json(s));
  EXPECT_EQ(doc["tune"]["tolerance"], (nlohmann::json{{"abs", 0.1}}));
  EXPECT_EQ(doc["tune"]["answer_value"], 0.25);
  const std::string py = setting_python(s);
  EXPECT_NE(py.find("# It is the answer of `amptune tune` for that sweep: \"train_loss\" 0.25\n"
                    "# against the fp32 reference's 0.2 (run \"sw/0-00000000\"; lower is "
                    "better),\n# tolerance abs 0.1; the search: \"budget spent\".\n"),
            std::string::npos)
      << py;
  out.search.answer_run_id = 99;  // not among the runs read
  EXPECT_THROW(export_tune_answer(out, kSource), StoreError);
}

}  // namespace
}  // namespace amptune::app
