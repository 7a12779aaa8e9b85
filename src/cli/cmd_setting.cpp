// `amptune export-setting RUN` and `amptune tune --emit FORMAT FILE`: a run's precision setting as
// a Python module for the user's own PyTorch training, or as JSON (app/artifacts/setting_export.h;
// docs/TUNE.md "Using the answer in your training script").
#include <iostream>

#include "app/artifacts/setting_export.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/version.h"

namespace amptune::cli {
namespace {

std::string generator() {
  return std::string("amptune ") + kVersion + " (" + kGitCommit + (kGitDirty ? ", modified" : "") +
         ")";
}

// `text` to the file `out` (atomically), or to standard output when `out` is empty.
void write_setting(const app::ExportedSetting& setting, app::SettingFormat format,
                   const std::string& out) {
  const std::string text = app::render_setting(setting, format);
  if (out.empty()) {
    std::cout << text;
    return;
  }
  write_file_atomic(out, text);
  log::info("wrote " + out + ": the setting of run " + std::to_string(setting.run_id) + " (" +
            setting.run_name + ") as " +
            (format == app::SettingFormat::kPython ? "a Python module" : "JSON"));
}

}  // namespace

int cmd_export_setting(const Invocation& inv) {
  std::string db, run_ref, format, out;
  Options opts("export-setting",
               "usage: amptune export-setting RUN [--format python|json] [--out FILE] "
               "[options]\n\n"
               "Writes RUN's precision setting for a training script in plain PyTorch (>= 1.13; "
               "no amptune, no apex): as a Python module (--format python, the default) whose "
               "apply(model, device_type) puts the opt level, the loss scale and the modules "
               "kept in fp32 on a model and returns the autocast context, the parameters to "
               "optimize and the step; or as the same setting in JSON (--format json). Standard "
               "output unless --out names a file (docs/TUNE.md \"Using the answer in your "
               "training script\").");
  opts.run(&run_ref).db(&db).quiet().format(&format, {"python", "json"});
  opts.add()("out", po::value(&out),
             "file to write (missing folders are made; default: "
             "standard output)");
  if (!opts.parse(inv.args)) return 0;
  const app::SettingFormat kind = app::parse_setting_format(format, "--format");
  const app::SettingSource source{db, generator(), "export-setting"};
  write_setting(app::export_run_setting(db, run_ref, source), kind, out);
  return 0;
}

void add_emit_option(Options& opts, std::vector<std::string>* emit) {
  opts.add()("emit", po::value(emit)->multitoken(),
             "FORMAT FILE: when the search has an answer, write its setting to FILE as a Python "
             "module (python) or JSON (json), as amptune export-setting does; exit code 8 and "
             "nothing written when it has none");
}

void check_emit_option(const std::vector<std::string>& emit, bool dry_run) {
  if (emit.empty()) return;
  if (emit.size() != 2) {
    throw UsageError(
        "--emit takes a format and a file: --emit python FILE.py or --emit json "
        "FILE.json");
  }
  (void)app::parse_setting_format(emit[0], "--emit");
  if (dry_run) throw UsageError("--emit writes the search's answer: not with --dry-run");
}

int emit_tune_answer(const std::vector<std::string>& emit, const std::string& db,
                     const app::TuneOutcome& outcome, int exit_code) {
  if (emit.empty()) return exit_code;
  if (outcome.stopped) {
    log::warn(
        "--emit: the search was stopped before its end; run the command again to continue "
        "it (nothing written to " +
        emit[1] + ")");
    return exit_code;
  }
  const app::SettingSource source{db, generator(), "tune --emit"};
  write_setting(app::export_tune_answer(outcome, source),
                app::parse_setting_format(emit[0], "--emit"), emit[1]);
  return exit_code;
}

}  // namespace amptune::cli
