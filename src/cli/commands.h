// One function per subcommand. Each parses its options with cli::Options (options.h), calls the
// application layer (src/app) and prints; it returns the process exit code. Errors are
// thrown as amptune::Error and mapped to exit codes by cli::dispatch (command_table.h), whose
// table names each of these functions once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/run/runner.h"
#include "cli/options.h"

namespace amptune::app {
struct TuneOutcome;  // app/tune/tune.h
}

namespace amptune::cli {

struct Invocation {
  std::vector<std::string> args;  // after the subcommand name
  std::string command_line;       // the whole command line, recorded with each run
};

int cmd_run(const Invocation& inv);
int cmd_tune(const Invocation& inv);  // cmd_tune.cpp
// The options the commands that train share (run, resume, fork, tune; cmd_run.cpp).
struct TrainingFlags {
  int threads = 0;                        // --threads; 0 = the config's `threads`
  int stop_after = -1;                    // --stop-after-epoch; -1 = to the end
  int nproc = 1;                          // --nproc
  std::optional<std::string> peak_flops;  // --peak-flops
  bool no_progress = false;               // --no-progress (run and tune declare it)
};
// --threads, --stop-after-epoch (its help `stop_help`), --nproc and --peak-flops into *flags.
void add_training_options(Options& opts, TrainingFlags* flags, const char* stop_help);
// The training options and the binary's provenance; progress lines unless -q or --no-progress.
app::SweepOptions sweep_options(const Options& opts, const TrainingFlags& flags,
                                const Invocation& inv);
int cmd_resume(const Invocation& inv);
int cmd_fork(const Invocation& inv);
int cmd_list(const Invocation& inv);
int cmd_show(const Invocation& inv);
int cmd_data(const Invocation& inv);
int cmd_bench(const Invocation& inv);
// cmd_status.cpp / cmd_compare.cpp / cmd_report.cpp: the query side of the results database.
int cmd_status(const Invocation& inv);
int cmd_compare(const Invocation& inv);
int cmd_report(const Invocation& inv);
// cmd_serve.cpp: the live web view (web/server.h).
int cmd_serve(const Invocation& inv);
// cmd_checkpoints.cpp: evaluate / export / diagnose saved checkpoints, delete unreferenced files.
int cmd_eval(const Invocation& inv);
int cmd_export(const Invocation& inv);
int cmd_gc(const Invocation& inv);
int cmd_diagnose(const Invocation& inv);
// cmd_merge.cpp: several databases into one (shards of a sweep); cmd_slurm.cpp: Slurm scripts.
int cmd_merge(const Invocation& inv);
int cmd_slurm(const Invocation& inv);
// cmd_setting.cpp: a run's precision setting as a Python module or JSON (export-setting), and
// tune's --emit FORMAT FILE: the option, its check (two words, a known format, no --dry-run) and
// the writing of the search's answer (an Error of exit code 8 when it has none; nothing written
// when a signal stopped the search); it returns `exit_code`.
int cmd_export_setting(const Invocation& inv);
void add_emit_option(Options& opts, std::vector<std::string>* emit);
void check_emit_option(const std::vector<std::string>& emit, bool dry_run);
int emit_tune_answer(const std::vector<std::string>& emit, const std::string& db,
                     const app::TuneOutcome& outcome, int exit_code);
// cmd_version.cpp: version, git commit, LibTorch version, the malloc and BLAS in use.
int cmd_version(const Invocation& inv);
// The databases of Options::dbs (globs expanded) as one store (app::open_databases): several
// are merged in memory, which an info line says.
std::unique_ptr<store::Store> open_results(const std::vector<std::string>& dbs);

}  // namespace amptune::cli
