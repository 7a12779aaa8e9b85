// A run's precision setting for the user's own training script (`amptune export-setting RUN`,
// `amptune tune SWEEP --emit`; docs/TUNE.md "Using the answer in your training script"):
//
//   const app::SettingSource from{db, "amptune 0.9.0 (1a2b3c4)", "export-setting"};
//   const app::ExportedSetting s = app::export_run_setting(db, "tuned/3-1a2b3c4d", from);
//   write_file_atomic("amp_setting.py", app::render_setting(s, app::SettingFormat::kPython));
//
// The Python form is a self-contained module for plain PyTorch >= 1.13 (no amptune, no apex):
// `apply(model, device_type)` returns a Setting with autocast(), parameters() (the tensors the
// optimizer steps: fp32 masters under O2), step(loss, optimizer) and scaler. The JSON form is
// the same setting as data (its fields: docs/TUNE.md "The setting as JSON").
//
// What the run's amp.* keys mean comes from the run's typed settings (app::resolve_run) and
// amp::apex_properties, never re-derived here. Everything read from the database is input
// (docs/SECURITY.md): strings must be UTF-8 and reach the Python file only as literals of
// app/artifacts/python_literal.h (in its comments too), numbers only finite, and a setting the
// module cannot reproduce faithfully is refused (ConfigError naming the run and key). No torch,
// no SQL. An FP8 recipe (amp.fp8.*) has no plain-PyTorch form: it is exported as data (SETTING
// "fp8") with a Transformer Engine recipe built from it (fp8_recipe(), fp8_autocast()) and the
// Linear modules it covers (fp8_linears(model)); apply() itself sets the base precision only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/tune/tune.h"
#include "core/words.h"
#include "records/records.h"

namespace amptune::app {

// Where an export comes from, for the file's header.
struct SettingSource {
  std::string database;   // the results database as the command named it
  std::string generator;  // "amptune 0.9.0 (1a2b3c4)"
  std::string command;    // "export-setting" or "tune --emit"
};

// The tune search whose answer a setting is.
struct TuneAnswerInfo {
  std::string metric;
  bool higher_is_better = true;
  double tolerance_abs = 0, tolerance_rel = 0;  // the tune: block's; both 0: not recorded
  double answer_value = 0, reference_value = 0;
  std::string reference_run;  // its name
  std::string note;           // how the search ended
};

// apex's dynamic loss scaler changes the scale by fixed factors (no amp.* key sets them; the
// defaults of amp/scaler.h ScalerOptions, which tests/unit/app/setting_export_test.cpp checks).
inline constexpr double kScaleGrowthFactor = 2.0;
inline constexpr double kScaleBackoffFactor = 0.5;

// amp.fp8.* of an FP8 run, in the config's words (amp/policy.h Fp8Policy's meaning).
struct Fp8Export {
  std::string format;        // "hybrid" | "e4m3"
  std::string recipe;        // "delayed" | "current"
  int margin = 0;
  int64_t amax_history_len = 1024;
  std::string amax_compute;  // "max" | "most_recent"
  std::vector<std::string> skip_modules;  // globs, matched as fp32_modules are
};

struct ExportedSetting {
  SettingSource source;
  int64_t run_id = 0;
  std::string run_name, run_status, sweep, config_hash, model;
  std::optional<TuneAnswerInfo> tune;  // set by export_tune_answer
  // What the module does (amp::Policy's properties of the run's amp.* keys).
  OptLevel opt_level = OptLevel::kO0;
  std::optional<Dtype> dtype;  // unset at O0 (nothing in low precision)
  bool autocast = false;       // per-op casts (O1): torch.autocast
  bool cast_model = false;     // O2/O3: the model's weights in the low type
  bool keep_batchnorm_fp32 = false;
  bool master_weights = false;
  bool combine_grad = false;  // speed only: not reproduced, stated
  bool dynamic_scale = false;
  double static_scale = 1.0;  // when !dynamic_scale
  double init_scale = 65536.0;
  int64_t growth_interval = 2000;
  double min_scale = 0;  // 0 = none
  double max_scale = 0;
  std::vector<std::string> fp32_modules;  // globs (fnmatch; '*' crosses dots)
  std::vector<std::string> int32_casts;   // casts.int32 (train/cast_points.h says where)
  std::optional<Fp8Export> fp8;           // set when amp.fp8.enabled
};

// The setting of the run `row` (its stored configuration resolved as training resolves it).
// Throws ConfigError naming the run for a configuration this build cannot read, a string that is
// not UTF-8, or an amp.fp32_modules glob the module could not match as amptune does (one holding
// a control character, a backslash, or a bracket expression Python's fnmatch reads otherwise:
// "[^...]", "[[:class:]]"); amp.fp8.skip_modules globs are held to the same rules.
ExportedSetting setting_of(const records::RunRow& row, const SettingSource& source);

// `amptune export-setting`: the setting of run `ref` (id or name, app::find_run) of the existing
// database `db`.
ExportedSetting export_run_setting(const std::string& db, const std::string& ref,
                                   const SettingSource& source);

// `amptune tune --emit`: the setting of the answer of the search `out`, with the search's metric,
// tolerance and values. A search without an answer (still searching, or exhausted) is an Error
// with exit code 8 naming the sweep and how the search stands: nothing is written.
ExportedSetting export_tune_answer(const TuneOutcome& out, const SettingSource& source);

enum class SettingFormat { kPython, kJson };
// "python" or "json"; UsageError naming `option` and the choices for anything else.
SettingFormat parse_setting_format(const std::string& word, const std::string& option);

// The setting as a Python module (setting_python.cpp) or as JSON text (two-space indented,
// ending in a newline). Throws ConfigError for a value that cannot be written (a non-finite
// number: the run's name and the key).
std::string render_setting(const ExportedSetting& setting, SettingFormat format);
std::string setting_python(const ExportedSetting& setting);
std::string setting_json(const ExportedSetting& setting);
// The JSON form as a document: {format, version, generator, command, source, tune, setting}, in
// that order (docs/TUNE.md "The setting as JSON"); the Python module's SOURCE, TUNE and SETTING
// are its last three members.
nlohmann::ordered_json setting_document(const ExportedSetting& setting);

}  // namespace amptune::app
