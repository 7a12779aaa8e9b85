// amptune: parses the subcommand, dispatches, and maps errors to exit codes (README "Exit codes").
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <boost/program_options/errors.hpp>
#include <torch/version.h>

#include "cli/commands.h"
#include "cli/terminal.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/process.h"
#include "core/version.h"

namespace {

const char* const kUsage = R"(usage: amptune <command> [options]

commands:
  run SWEEP.yaml      train every cell of a sweep (skips finished cells, resumes interrupted ones)
  resume RUN          continue one run from its newest (or --from-epoch N) checkpoint
  fork RUN --epoch N  a new run from RUN's epoch-N checkpoint with changed settings (--set k=v)
  tune SWEEP.yaml     search for the lowest-precision setting within a tolerance of fp32 (the
                      sweep's tune: block): diagnose, change one knob, fork, compare, repeat
                      (--status: the decision path so far)
  list                runs as a table
  show RUN            one run's settings and epochs
  status              per sweep: done / running / pending / failed / diverged / pruned, ETA of
                      running runs
                      (--db takes several databases or a glob: shards before they are merged)
  compare --sweep S   pivot table of a sweep (--by keys, --metric, --epoch, --baseline, --format)
  report --sweep S --out DIR
                      HTML page with the comparison table and gnuplot plots
  serve               live read-only web view of the database (--port, --bind): sweeps,
                      comparison tables, runs' curves, tune searches, as they train
  data export-imagefolder
                      write IDX images (Fashion-MNIST) as an ImageNet-style JPEG folder
  data synth-rootnet  write a small synthetic Human3.6M / MuCo / MuPoTS / MPII data set
  bench SWEEP.yaml    loader and training images/s of sweep cells, side by side
  eval RUN            evaluate saved checkpoints (--epoch N | --all) and store their metrics
  diagnose RUN        where the run's precision setting first departs from fp32, module by
                      module, with advice (--epoch N --batches K)
  export RUN          write a checkpoint's weights as a PyTorch state dict (--epoch N --out F.pt)
  gc                  delete checkpoint files the database no longer references (--dry-run)
  merge A.sqlite B.sqlite ... --into FILE
                      merge results databases (shards of a sweep) into one, in one transaction
  slurm SWEEP.yaml    write (--submit: and submit) a Slurm array job of the sweep's shards and
                      the job that merges them
  version             print version, git commit, LibTorch version and the malloc in use

`amptune <command> --help` describes each command's options.
)";

void on_signal(int) { amptune::on_stop_signal(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace amptune;
  // Error messages and output carry text from files and databases: escaped on the way out.
  const cli::EscapedTerminal escaped;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  cli::Invocation inv;
  for (int i = 2; i < argc; ++i) inv.args.emplace_back(argv[i]);
  for (int i = 0; i < argc; ++i) inv.command_line += (i ? " " : "") + std::string(argv[i]);
  const std::string command = argv[1];

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // A file-size limit (ulimit -f, or a quota) must fail the write with EFBIG and a clear error,
  // not kill the process half-way.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    if (command == "run") return cli::cmd_run(inv);
    if (command == "tune") return cli::cmd_tune(inv);
    if (command == "resume") return cli::cmd_resume(inv);
    if (command == "fork") return cli::cmd_fork(inv);
    if (command == "list") return cli::cmd_list(inv);
    if (command == "show") return cli::cmd_show(inv);
    if (command == "data") return cli::cmd_data(inv);
    if (command == "bench") return cli::cmd_bench(inv);
    if (command == "status") return cli::cmd_status(inv);
    if (command == "serve") return cli::cmd_serve(inv);
    if (command == "compare") return cli::cmd_compare(inv);
    if (command == "report") return cli::cmd_report(inv);
    if (command == "eval") return cli::cmd_eval(inv);
    if (command == "export") return cli::cmd_export(inv);
    if (command == "diagnose") return cli::cmd_diagnose(inv);
    if (command == "gc") return cli::cmd_gc(inv);
    if (command == "merge") return cli::cmd_merge(inv);
    if (command == "slurm") return cli::cmd_slurm(inv);
    if (command == "version" || command == "--version") {
      std::cout << "amptune " << kVersion << " (" << kGitCommit << (kGitDirty ? "-dirty" : "")
                << ")\nLibTorch " << TORCH_VERSION << ", malloc: " << allocator_name()
                << "\nBLAS: " << blas_name() << "\n";
      return 0;
    }
    std::cerr << "amptune: unknown command '" << command << "'\n\n" << kUsage;
    return static_cast<int>(ExitCode::kUsage);
  } catch (const Error& e) {
    std::cerr << "amptune: error: " << e.what() << "\n";
    return static_cast<int>(e.code());
  } catch (const boost::program_options::error& e) {
    std::cerr << "amptune " << command << ": " << e.what() << " (see amptune " << command
              << " --help)\n";
    return static_cast<int>(ExitCode::kUsage);
  } catch (const std::exception& e) {
    std::cerr << "amptune: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kInternal);
  }
}
