// `amptune eval`, `amptune export`, `amptune diagnose` and `amptune gc`: options and output;
// app/artifacts/checkpoint_commands.h does the work on the saved checkpoints of runs.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>

#include "app/artifacts/checkpoint_commands.h"
#include "app/views/inspect.h"
#include "app/views/table.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::cli {
namespace {

// Full precision for metric values: the table shows what the database holds.
std::string value_text(double v) { return app::significant(v, 6); }

std::string human_bytes(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

// The metrics of each evaluated checkpoint as a table, and why one failed or was not stored;
// the exit status: 6 when a checkpoint could not be evaluated, 2 when metrics were left
// unstored, 0 otherwise.
int print_evaluation(const app::RunEvaluation& evaluation) {
  const records::RunRow& run = evaluation.run;
  const std::vector<train::EpochEvaluation>& results = evaluation.epochs;

  std::set<std::string> names;
  for (auto& r : results) {
    for (auto& m : r.metrics) names.insert(m.first);
  }
  std::vector<std::string> header{"epoch"};
  header.insert(header.end(), names.begin(), names.end());
  header.push_back("seconds");
  header.push_back("status");
  app::Table table(header);
  int failed = 0, unstored = 0;
  for (auto& r : results) {
    std::vector<std::string> row{std::to_string(r.epoch)};
    for (auto& n : names) {
      auto it = r.metrics.find(n);
      row.push_back(it == r.metrics.end() ? "-" : value_text(it->second));
    }
    row.push_back(app::fixed(r.seconds, 1));
    row.push_back(!r.error.empty()          ? "FAILED"
                  : !r.not_recorded.empty() ? "not stored"
                                            : "recorded");
    if (!r.error.empty()) ++failed;
    if (!r.not_recorded.empty()) ++unstored;
    table.add(row);
  }
  std::cout << "run " << run.id << " " << log::printable(run.name) << "\n";
  table.print(std::cout);
  for (auto& r : results) {
    if (!r.error.empty()) std::cerr << "amptune eval: epoch " << r.epoch << ": " << r.error << "\n";
    if (!r.not_recorded.empty()) {
      std::cerr << "amptune eval: epoch " << r.epoch << " not stored: " << r.not_recorded
                << "; pass --replace to store them anyway, or leave out --max-batches to "
                   "evaluate the training-time set\n";
    }
  }
  if (failed > 0) {
    std::cerr << "amptune eval: " << failed << " of " << results.size()
              << " checkpoints could not be evaluated\n";
    return static_cast<int>(ExitCode::kCheckpoint);
  }
  return unstored > 0 ? static_cast<int>(ExitCode::kUsage) : 0;
}

}  // namespace

int cmd_eval(const Invocation& inv) {
  std::string db, run_ref;
  std::optional<int> epoch;
  std::optional<int64_t> max_batches;
  int threads = 0;
  bool all = false, replace = false;
  Options opts("eval",
               "usage: amptune eval RUN [--epoch N | --all] [options]\n\n"
               "Evaluates saved checkpoints of RUN (id or name; default: the newest) on the\n"
               "run's evaluation split (RootNet: its test set) with the model built as in\n"
               "training, and stores the metrics for those epochs (replacing those names).\n"
               "By default it evaluates the set training evaluated, so it reproduces the\n"
               "training-time metrics; metrics of another set (--max-batches) never replace\n"
               "stored ones silently: they are printed and stored only with --replace\n"
               "(val_samples records the set's size). Exits 6 when a checkpoint could not be\n"
               "evaluated, 2 when metrics were left unstored for that reason.");
  opts.run(&run_ref).db(&db).quiet().threads(&threads);
  opts.add()("epoch", optional_value(&epoch), "evaluate this epoch's checkpoint (0-based)")(
      "all", po::bool_switch(&all), "evaluate every kept checkpoint of the run")(
      "max-batches", optional_value(&max_batches),
      "evaluation batches per checkpoint; -1 = the whole evaluation split (default: the "
      "batches training evaluated, schedule.eval_step_per_epoch)")(
      "replace", po::bool_switch(&replace),
      "store the metrics even where training computed that epoch's metrics on "
      "another set (val_samples differs); without it they are printed, not stored");
  if (!opts.parse(inv.args)) return 0;
  if (epoch && all) throw UsageError("amptune eval takes --epoch N or --all, not both");
  if (epoch && *epoch < 0) throw UsageError("--epoch must be >= 0");
  if (max_batches && (*max_batches == 0 || *max_batches < -1)) {
    throw UsageError("--max-batches must be -1 (whole split) or >= 1, got " +
                     std::to_string(*max_batches));
  }
  train::EvalOptions options;
  if (epoch) options.epoch = *epoch;
  options.all = all;
  options.threads = threads;
  if (max_batches) options.max_batches = *max_batches;
  options.replace = replace;
  return print_evaluation(app::evaluate_run(db, run_ref, options));
}

int cmd_export(const Invocation& inv) {
  std::string db, run_ref, out;
  std::optional<int> epoch;
  Options opts("export",
               "usage: amptune export RUN --epoch N --out FILE.pt [options]\n\n"
               "Writes the weights of RUN's checkpoint of epoch N as a state dict that\n"
               "PyTorch's torch.load reads ({name: tensor}, torchvision's names; full precision:\n"
               "O2 runs export their fp32 master weights).");
  opts.run(&run_ref).db(&db);
  opts.add()("epoch", optional_value(&epoch), "the checkpoint's epoch (0-based; required)")(
      "out", po::value(&out), "file to write, e.g. weights.pt (required)");
  if (!opts.parse(inv.args)) return 0;
  if (!epoch || *epoch < 0) throw UsageError("amptune export needs --epoch N (>= 0)");
  if (out.empty()) throw UsageError("amptune export needs --out FILE.pt");
  const app::RunExport exported = app::export_run(db, run_ref, *epoch, out);
  const train::ExportResult& result = exported.file;
  std::cout << "wrote " << result.path << ": " << result.tensors << " tensors, "
            << human_bytes(result.bytes) << " (run " << exported.run.name << ", epoch " << *epoch
            << ")\n";
  return 0;
}

int cmd_diagnose(const Invocation& inv) {
  std::string db, run_ref, against = "O0";
  std::optional<int> epoch;
  int batches = 2, threads = 0, top = 12;
  double cosine_min = 0.99;
  Options opts("diagnose",
               "usage: amptune diagnose RUN [--epoch N] [--batches K] [--against O0]\n"
               "                        [--cosine-min 0.99] [options]\n\n"
               "Where RUN's precision setting departs from fp32: loads the checkpoint (default:\n"
               "the newest; the initial weights when the run has none), runs forward and\n"
               "backward on K training batches of the run's own data order twice from the same\n"
               "weights - under the run's policy (backend, loss scale, fp32 modules, cast\n"
               "points) and under --against - and compares every module's output, every\n"
               "parameter's unscaled gradient and every int32 cast point: cosine, max abs / rel\n"
               "error, shares off by more than 1e-3 / 5e-3, overflow and underflow shares of\n"
               "the low-precision tensors. Stores the rows (tables diagnoses, diagnostics,\n"
               "diagnosis_advice; view first_divergence) and prints the worst rows, the first\n"
               "module that departs and advice (docs/AMP.md \"Diagnosing a precision setting\").");
  opts.run(&run_ref).db(&db).quiet().threads(&threads);
  opts.add()("epoch", optional_value(&epoch), "the checkpoint's epoch (0-based)")(
      "batches", po::value(&batches)->default_value(2), "training batches to compare")(
      "against", po::value(&against)->default_value("O0"), "the reference opt level")(
      "cosine-min", po::value(&cosine_min)->default_value(0.99),
      "a module whose output's cosine similarity is below this departs")(
      "top", po::value(&top)->default_value(12), "worst rows to print");
  if (!opts.parse(inv.args)) return 0;
  if (epoch && *epoch < 0) throw UsageError("--epoch must be >= 0");
  train::DiagnoseOptions options;
  if (epoch) options.epoch = *epoch;
  options.batches = batches;
  options.against = against;
  options.cosine_min = cosine_min;
  options.threads = threads;
  const app::RunDiagnosis diagnosis = app::diagnose_run(db, run_ref, options);
  const records::RunRow& run = diagnosis.run;
  const records::Diagnosis& d = diagnosis.diagnosis;
  const std::vector<records::DiagnosticRow>& sorted = diagnosis.by_severity;
  auto share = [](double v) { return std::isnan(v) ? std::string("-") : app::fixed(v * 100, 2); };
  app::Table table({"kind", "module", "dtype", "cosine", "max_abs", "max_rel", ">1e-3 %", ">5e-3 %",
                    "overflow %", "underflow %"});
  for (size_t i = 0; i < sorted.size() && static_cast<int>(i) < top; ++i) {
    const auto& r = sorted[i];
    table.add({records::to_string(r.kind), r.module.empty() ? "(model)" : r.module,
               to_string(r.dtype), value_text(r.cosine), value_text(r.max_abs_err),
               value_text(r.max_rel_err), share(r.frac_rel_err_1e3), share(r.frac_rel_err_5e3),
               share(r.overflow_frac), share(r.underflow_frac)});
  }
  std::cout << "run " << log::printable(run.name) << ", "
            << (d.epoch >= 0 ? "epoch " + std::to_string(d.epoch) : std::string("initial weights"))
            << ": " << d.rows.size() << " comparisons on " << d.batches << " batch(es) against "
            << to_string(d.against) << ", loss scale " << value_text(d.loss_scale) << ", "
            << app::fixed(d.seconds, 1) << " s\n\n";
  table.print(std::cout);
  if (!diagnosis.fp8_slots.empty()) {
    std::cout << "\nFP8: " << d.fp8_rows.size() << " quantisations\n";
    app::fp8_table(diagnosis.fp8_slots).print(std::cout);
  }
  if (const auto& first = diagnosis.first_divergence) {
    std::cout << "\nfirst divergence: " << (first->module.empty() ? "(model)" : first->module)
              << " (forward #" << first->seq << ")\n";
  } else {
    std::cout << "\nno module departs (every cosine >= " << value_text(d.cosine_min)
              << ", no overflow)\n";
  }
  for (const auto& a : d.advice) std::cout << "advice: " << a.advice << "\n";
  return 0;
}

int cmd_gc(const Invocation& inv) {
  std::string db;
  bool dry_run = false;
  Options opts("gc",
               "usage: amptune gc [--dry-run] [options]\n\n"
               "Deletes checkpoint files the database no longer references: unreferenced files\n"
               "and temp files of interrupted saves in each run's checkpoint directory, and the\n"
               "directories of deleted runs under DB_DIR/checkpoints. Running runs are skipped.");
  opts.db(&db);
  opts.add()("dry-run", po::bool_switch(&dry_run), "list what would be deleted and delete nothing");
  if (!opts.parse(inv.args)) return 0;
  const app::GcReport report = app::collect_garbage(db, dry_run);
  for (auto& s : report.skipped) std::cerr << "amptune gc: skipped " << s << "\n";
  for (auto& f : report.files) {
    std::cout << (dry_run ? "would delete " : "deleted ") << f.path << " (" << f.bytes << " bytes, "
              << f.reason << ")\n";
  }
  std::cout << (dry_run ? "would free " : "freed ") << report.bytes << " bytes ("
            << human_bytes(report.bytes) << ") in " << report.files.size() << " files"
            << (dry_run ? "; nothing deleted (dry run)" : "") << "\n";
  return 0;
}

}  // namespace amptune::cli
