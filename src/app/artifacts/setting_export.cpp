// A run's setting read from its typed settings and amp's policy, checked, and written as JSON
// (the Python writer: setting_python.cpp).
#include "app/artifacts/setting_export.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "amp/policy.h"
#include "app/artifacts/python_literal.h"
#include "app/run/run_input.h"
#include "app/views/inspect.h"
#include "core/error.h"
#include "core/log.h"
#include "train/cast_points.h"

namespace amptune::app {
namespace {

std::string run_text(const records::RunRow& row) {
  return "run " + std::to_string(row.id) + " (" + log::printable(row.name) + ")";
}

// A glob Python's fnmatch.fnmatchcase matches as amptune's fnmatch(3) with no flags does: no
// control character (never in a module name), no backslash (an escape for fnmatch(3), a
// character for Python), no "[^" (negation for fnmatch(3), a literal '^' for Python), no
// "[[:" (character classes, which Python lacks). Empty when fine, else why not.
std::string glob_problem(const std::string& glob) {
  for (const char c : glob) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "a control character";
    if (c == '\\') return "a backslash (an escape for amptune's fnmatch, a character for Python's)";
  }
  if (glob.find("[^") != std::string::npos)
    return "\"[^\" (a negation for amptune's fnmatch, a literal ^ for Python's; write [!...])";
  if (glob.find("[[:") != std::string::npos) return "a character class \"[[:...:]]\"";
  return "";
}

void check_text(const records::RunRow& row, const std::string& what, const std::string& text) {
  if (!valid_utf8(text))
    throw ConfigError(run_text(row) + ": its " + what + " is not valid UTF-8; nothing written");
}

void check_finite(const records::RunRow& row, const std::string& key, double value) {
  if (!std::isfinite(value)) {
    throw ConfigError(run_text(row) + ": " + key + " is not a finite number; nothing written");
  }
}

void check_setting(const records::RunRow& row, const ExportedSetting& s) {
  for (const auto& [what, text] : {std::pair<std::string, const std::string&>{"name", s.run_name},
                                   {"sweep", s.sweep},
                                   {"config hash", s.config_hash},
                                   {"model.name", s.model},
                                   {"database path", s.source.database}}) {
    check_text(row, what, text);
  }
  const auto check_globs = [&row](const std::vector<std::string>& globs, const std::string& key) {
    for (const std::string& glob : globs) {
      check_text(row, key + " entry", glob);
      const std::string problem = glob_problem(glob);
      if (!problem.empty()) {
        throw ConfigError(run_text(row) + ": " + key + " entry " +
                          python_string(glob, "the glob") + " holds " + problem +
                          ", which the generated module could not match as amptune does; "
                          "nothing written");
      }
    }
  };
  check_globs(s.fp32_modules, "amp.fp32_modules");
  if (s.fp8) check_globs(s.fp8->skip_modules, "amp.fp8.skip_modules");
  for (const std::string& name : s.int32_casts) {
    bool known = false;
    for (const auto& point : train::kCastPoints) known = known || name == point.name;
    if (!known) {
      throw ConfigError(run_text(row) + ": casts.int32 names an unknown cast point " +
                        log::printable(name) + "; nothing written");
    }
  }
  check_finite(row, "amp.loss_scale", s.static_scale);
  check_finite(row, "the initial loss scale", s.init_scale);
  check_finite(row, "amp.min_loss_scale", s.min_scale);
  check_finite(row, "amp.max_loss_scale", s.max_scale);
}

// tune.tolerance.abs / .rel of a stored tune: block (its canonical JSON, flat keys); zeros when
// the text does not hold them as numbers.
std::pair<double, double> stored_tolerance(const std::string& block_json) {
  const nlohmann::json block = nlohmann::json::parse(block_json, nullptr, false);
  auto number = [&](const char* key) {
    if (!block.is_object() || !block.contains(key) || !block[key].is_number()) return 0.0;
    const double v = block[key].get<double>();
    return std::isfinite(v) && v > 0 ? v : 0.0;
  };
  return {number("tune.tolerance.abs"), number("tune.tolerance.rel")};
}

// PyTorch's name of the low-precision type.
const char* torch_dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp16:
      return "float16";
    case Dtype::kBf16:
      return "bfloat16";
  }
  return "float16";
}

using Json = nlohmann::ordered_json;

Json finite_or_null(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json tune_document(const TuneAnswerInfo& t) {
  Json tolerance = nullptr;
  if (t.tolerance_abs > 0) tolerance = Json{{"abs", t.tolerance_abs}};
  if (t.tolerance_rel > 0) tolerance = Json{{"rel", t.tolerance_rel}};
  return Json{{"metric", t.metric},
              {"higher_is_better", t.higher_is_better},
              {"tolerance", tolerance},
              {"answer_value", finite_or_null(t.answer_value)},
              {"reference_value", finite_or_null(t.reference_value)},
              {"reference_run", t.reference_run},
              {"note", t.note}};
}

Json loss_scale_document(const ExportedSetting& s) {
  if (!s.dynamic_scale) return Json{{"dynamic", false}, {"scale", s.static_scale}};
  return Json{{"dynamic", true},
              {"init_scale", s.init_scale},
              {"growth_factor", kScaleGrowthFactor},
              {"backoff_factor", kScaleBackoffFactor},
              {"growth_interval", s.growth_interval},
              {"min_scale", s.min_scale > 0 ? Json(s.min_scale) : Json(nullptr)},
              {"max_scale", s.max_scale > 0 ? Json(s.max_scale) : Json(nullptr)}};
}

Json fp8_document(const ExportedSetting& s) {
  if (!s.fp8) return nullptr;
  const Fp8Export& f = *s.fp8;
  return Json{{"format", f.format},
              {"recipe", f.recipe},
              {"margin", f.margin},
              {"amax_history_len", f.amax_history_len},
              {"amax_compute", f.amax_compute},
              {"skip_modules", f.skip_modules}};
}

}  // namespace

ExportedSetting setting_of(const records::RunRow& row, const SettingSource& source) {
  const train::RunInput input = resolve_run(row);
  amp::Policy policy;
  try {
    policy = amp::apex_properties(input.settings().amp);
  } catch (const ConfigError& e) {
    throw ConfigError(run_text(row) + ": " + e.what());
  }
  ExportedSetting s;
  s.source = source;
  s.run_id = row.id;
  s.run_name = row.name;
  s.run_status = records::to_string(row.status);
  s.sweep = row.sweep_name;
  s.config_hash = row.config_hash;
  s.model = input.settings().model.name;
  s.opt_level = policy.opt_level;
  if (policy.low_precision()) s.dtype = policy.dtype;
  s.autocast = policy.patch_ops;
  s.cast_model = policy.cast_model;
  s.keep_batchnorm_fp32 = policy.keep_batchnorm_fp32;
  s.master_weights = policy.master_weights;
  s.combine_grad = policy.combine_grad;
  s.dynamic_scale = policy.dynamic_scale;
  s.static_scale = policy.static_scale;
  s.init_scale = policy.init_scale;
  s.growth_interval = policy.growth_interval;
  s.min_scale = policy.min_scale;
  s.max_scale = policy.max_scale;
  s.fp32_modules = policy.fp32_modules;
  s.int32_casts = input.settings().casts.int32;
  if (policy.fp8.enabled) {  // the words of core/words.h, the values as the policy checked them
    const Fp8Settings& words = input.settings().amp.fp8;
    s.fp8 = Fp8Export{to_string(words.format), to_string(words.recipe), policy.fp8.margin,
                      policy.fp8.amax_history_len, to_string(words.amax_compute),
                      policy.fp8.skip_modules};
  }
  check_setting(row, s);
  return s;
}

ExportedSetting export_run_setting(const std::string& db, const std::string& ref,
                                   const SettingSource& source) {
  const store::Store store = open_existing(db);
  return setting_of(find_run(store, ref), source);
}

ExportedSetting export_tune_answer(const TuneOutcome& out, const SettingSource& source) {
  const records::TuneSearchRow& search = out.search;
  if (search.status != records::TuneStatus::kAnswered) {
    throw Error(ExitCode::kFailedRuns,
                "the tune search of sweep " + log::printable(search.sweep_name) +
                    " has no answer to write (" + records::to_string(search.status) +
                    (search.note.empty() ? "" : ": " + log::printable(search.note)) +
                    "); nothing written");
  }
  const auto answer = out.runs.find(search.answer_run_id);
  if (answer == out.runs.end()) {
    throw StoreError("the answer of the tune search of sweep " + log::printable(search.sweep_name) +
                     ", run " + std::to_string(search.answer_run_id) + ", is not in the database");
  }
  ExportedSetting s = setting_of(answer->second, source);
  TuneAnswerInfo t;
  t.metric = search.metric;
  t.higher_is_better = search.higher_is_better;
  std::tie(t.tolerance_abs, t.tolerance_rel) = stored_tolerance(search.block_json);
  t.answer_value = search.answer_value;
  t.reference_value = search.reference_value;
  const auto reference = out.runs.find(search.reference_run_id);
  if (reference != out.runs.end()) t.reference_run = reference->second.name;
  t.note = search.note;
  for (const auto& [what, text] : {std::pair<std::string, const std::string&>{"metric", t.metric},
                                   {"reference run's name", t.reference_run},
                                   {"tune note", t.note}}) {
    check_text(answer->second, what, text);
  }
  s.tune = t;
  return s;
}

SettingFormat parse_setting_format(const std::string& word, const std::string& option) {
  if (word == "python") return SettingFormat::kPython;
  if (word == "json") return SettingFormat::kJson;
  throw UsageError(option + " takes python or json, got " + log::printable(word));
}

std::string render_setting(const ExportedSetting& setting, SettingFormat format) {
  return format == SettingFormat::kPython ? setting_python(setting) : setting_json(setting);
}

nlohmann::ordered_json setting_document(const ExportedSetting& s) {
  Json casts = Json::array();
  for (const std::string& name : s.int32_casts) {
    for (const auto& p : train::kCastPoints) {
      if (name != p.name) continue;
      casts.push_back(Json{{"name", p.name},
                           {"side", p.train ? "train" : "test"},
                           {"field", p.field},
                           {"where", p.where}});
    }
  }
  const Json setting = {{"opt_level", to_string(s.opt_level)},
                        {"dtype", s.dtype ? Json(torch_dtype_name(*s.dtype)) : Json(nullptr)},
                        {"autocast", s.autocast},
                        {"cast_model", s.cast_model},
                        {"keep_batchnorm_fp32", s.keep_batchnorm_fp32},
                        {"master_weights", s.master_weights},
                        {"combine_grad", s.combine_grad},
                        {"loss_scale", loss_scale_document(s)},
                        {"fp32_modules", s.fp32_modules},
                        {"int32_casts", casts},
                        {"fp8", fp8_document(s)}};
  const Json source = {{"database", s.source.database},
                       {"run_id", s.run_id},
                       {"run_name", s.run_name},
                       {"run_status", s.run_status},
                       {"sweep", s.sweep},
                       {"config_hash", s.config_hash},
                       {"model", s.model}};
  return Json{{"format", "amptune-setting"},
              {"version", 1},
              {"generator", s.source.generator},
              {"command", s.source.command},
              {"source", source},
              {"tune", s.tune ? tune_document(*s.tune) : Json(nullptr)},
              {"setting", setting}};
}

// ASCII only (ensure_ascii): the text passes the terminal's escaping (cli/terminal.h) unchanged.
std::string setting_json(const ExportedSetting& s) {
  return setting_document(s).dump(2, ' ', /*ensure_ascii=*/true) + "\n";
}

}  // namespace amptune::app
