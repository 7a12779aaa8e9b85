#include "cli/command_table.h"

#include <iostream>

#include <boost/program_options/errors.hpp>

#include "core/error.h"

namespace amptune::cli {
namespace {

// The summaries start in this column of `amptune --help`: two spaces, the synopsis, two spaces.
constexpr size_t kSynopsisWidth = 18;

std::vector<Command> make_commands() {
  return {
      {"run", cmd_run,
       {{"run SWEEP.yaml",
         "train every cell of a sweep (skips finished cells, resumes interrupted ones)"}}},
      {"resume", cmd_resume,
       {{"resume RUN",
         "continue one run from its newest (or --from-epoch N) checkpoint"}}},
      {"fork", cmd_fork,
       {{"fork RUN --epoch N",
         "a new run from RUN's epoch-N checkpoint with changed settings (--set k=v)"}}},
      {"tune", cmd_tune,
       {{"tune SWEEP.yaml",
         "search for the lowest-precision setting within a tolerance of fp32 (the\n"
         "sweep's tune: block): diagnose, change one knob, fork, compare, repeat\n"
         "(--status: the decision path so far; --slurm: each step's runs as one\n"
         "Slurm array job, the search waiting where it was started; --emit python\n"
         "FILE.py: the answer as a module for plain PyTorch)"}}},
      {"list", cmd_list, {{"list", "runs as a table"}}},
      {"show", cmd_show, {{"show RUN", "one run's settings and epochs"}}},
      {"status", cmd_status,
       {{"status",
         "per sweep: done / running / pending / failed / diverged / pruned, ETA of\n"
         "running runs\n"
         "(--db takes several databases or a glob: shards before they are merged)"}}},
      {"compare", cmd_compare,
       {{"compare --sweep S",
         "pivot table of a sweep (--by keys, --metric, --epoch, --baseline, --format)"}}},
      {"report", cmd_report,
       {{"report --sweep S --out DIR", "HTML page with the comparison table and gnuplot plots"}}},
      {"serve", cmd_serve,
       {{"serve",
         "live read-only web view of the database (--port, --bind): sweeps,\n"
         "comparison tables, runs' curves, tune searches, as they train"}}},
      {"data", cmd_data,
       {{"data export-imagefolder",
         "write IDX images (Fashion-MNIST) as an ImageNet-style JPEG folder"},
        {"data synth-rootnet",
         "write a small synthetic Human3.6M / MuCo / MuPoTS / MPII data set"}}},
      {"bench", cmd_bench,
       {{"bench SWEEP.yaml", "loader and training images/s of sweep cells, side by side"}}},
      {"eval", cmd_eval,
       {{"eval RUN",
         "evaluate saved checkpoints (--epoch N | --all) and store their metrics"}}},
      {"diagnose", cmd_diagnose,
       {{"diagnose RUN",
         "where the run's precision setting first departs from fp32, module by\n"
         "module, with advice (--epoch N --batches K)"}}},
      {"export", cmd_export,
       {{"export RUN",
         "write a checkpoint's weights as a PyTorch state dict (--epoch N --out F.pt)"}}},
      {"export-setting", cmd_export_setting,
       {{"export-setting RUN",
         "the run's precision setting as a Python module for plain PyTorch\n"
         "(--format python: apply(model) -> autocast, fp32 modules, loss scale,\n"
         "O2's masters) or as JSON (--format json); --out FILE"}}},
      {"gc", cmd_gc,
       {{"gc", "delete checkpoint files the database no longer references (--dry-run)"}}},
      {"merge", cmd_merge,
       {{"merge A.sqlite B.sqlite ... --into FILE",
         "merge results databases (shards of a sweep) into one, in one transaction"}}},
      {"slurm", cmd_slurm,
       {{"slurm SWEEP.yaml",
         "write (--submit: and submit) a Slurm array job of the sweep's shards and\n"
         "the job that merges them"}}},
      {"version", cmd_version,
       {{"version", "print version, git commit, LibTorch version and the malloc in use"}},
       "--version"},
  };
}

// One usage line: the synopsis, then the summary's lines in the summary column.
void append_usage_line(const UsageLine& line, std::string& out) {
  const std::string indent(2 + kSynopsisWidth + 2, ' ');
  out += "  " + std::string(line.synopsis);
  if (line.synopsis.size() <= kSynopsisWidth) {
    out += std::string(kSynopsisWidth + 2 - line.synopsis.size(), ' ');
  } else {
    out += "\n" + indent;
  }
  std::string_view rest = line.summary;
  for (size_t end = rest.find('\n'); end != std::string_view::npos; end = rest.find('\n')) {
    out += std::string(rest.substr(0, end)) + "\n" + indent;
    rest.remove_prefix(end + 1);
  }
  out += std::string(rest) + "\n";
}

// The command line `args` names, with the error it throws mapped to its exit code.
int run_command(const Command& command, const std::vector<std::string>& args) {
  Invocation inv;
  inv.args.assign(args.begin() + 2, args.end());
  for (size_t i = 0; i < args.size(); ++i) inv.command_line += (i ? " " : "") + args[i];
  try {
    return command.run(inv);
  } catch (const Error& e) {
    std::cerr << "amptune: error: " << e.what() << "\n";
    return static_cast<int>(e.code());
  } catch (const boost::program_options::error& e) {
    std::cerr << "amptune " << args[1] << ": " << e.what() << " (see amptune " << args[1]
              << " --help)\n";
    return static_cast<int>(ExitCode::kUsage);
  } catch (const std::exception& e) {
    std::cerr << "amptune: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kInternal);
  }
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> table = make_commands();
  return table;
}

const Command* find_command(std::string_view name) {
  for (const Command& command : commands()) {
    if (command.name == name || (!command.alias.empty() && command.alias == name)) return &command;
  }
  return nullptr;
}

std::string usage_text() {
  std::string text = "usage: amptune <command> [options]\n\ncommands:\n";
  for (const Command& command : commands()) {
    for (const UsageLine& line : command.usage) append_usage_line(line, text);
  }
  return text + "\n`amptune <command> --help` describes each command's options.\n";
}

int dispatch(const std::vector<std::string>& args) {
  if (args.size() < 2 || args[1] == "--help" || args[1] == "-h" || args[1] == "help") {
    std::cout << usage_text();
    return args.size() < 2 ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  const Command* command = find_command(args[1]);
  if (!command) {
    std::cerr << "amptune: unknown command '" << args[1] << "'\n\n" << usage_text();
    return static_cast<int>(ExitCode::kUsage);
  }
  return run_command(*command, args);
}

}  // namespace amptune::cli
