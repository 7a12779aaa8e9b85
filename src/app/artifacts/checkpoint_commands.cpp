// app/artifacts/checkpoint_commands.h: eval, export, diagnose and gc on a results database.
#include "app/artifacts/checkpoint_commands.h"

#include "app/views/inspect.h"
#include "app/run/run_input.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::app {
namespace {

// Opens `db`, looks run `ref` up into Result::run, and lets `work(store, run, result)` fill the
// rest (`run`: the row resolved, app/run/run_input.h).
template <typename Result, typename Work>
Result on_run(const std::string& db, const std::string& ref, const Work& work) {
  store::Store store = open_existing(db);
  Result result;
  result.run = find_run(store, ref);
  work(store, resolve_run(result.run), result);
  return result;
}

// Run `run`'s epoch row of `epoch`, read now (retention may have run since the epochs were
// chosen); unset when the row is gone.
std::optional<records::EpochRow> row_now(const store::Store& store, const records::RunRow& run,
                                       int epoch) {
  for (auto& row : store.epochs(run.id)) {
    if (row.epoch == epoch) return row;
  }
  return std::nullopt;
}

}  // namespace

RunEvaluation evaluate_run(const std::string& db, const std::string& ref,
                           const train::EvalOptions& options) {
  return on_run<RunEvaluation>(db, ref, [&](store::Store& store, const train::RunInput& run,
                                            RunEvaluation& r) {
    const std::vector<int> epochs = train::checkpoint_epochs(run, store.epochs(run.id), options);
    train::CheckpointEvaluator evaluator(run, options);
    log::info("run " + r.run.name + ": evaluating " + std::to_string(epochs.size()) +
              " checkpoint(s) on " + evaluator.describe());
    for (const int epoch : epochs) {
      const std::optional<records::EpochRow> row = row_now(store, r.run, epoch);
      if (!row) throw CheckpointError("internal: epoch " + std::to_string(epoch) + " vanished");
      train::EpochEvaluation result = evaluator.evaluate(*row);
      if (result.error.empty() && (result.not_recorded.empty() || options.replace)) {
        result.not_recorded.clear();
        store.record_metrics(r.run.id, epoch, result.metrics);
      }
      r.epochs.push_back(std::move(result));
    }
  });
}

RunExport export_run(const std::string& db, const std::string& ref, int epoch,
                     const std::string& out) {
  return on_run<RunExport>(db, ref, [&](store::Store& store, const train::RunInput& run,
                                        RunExport& r) {
    train::EvalOptions select;
    select.epoch = epoch;
    const auto rows = store.epochs(run.id);
    train::checkpoint_epochs(run, rows, select);  // throws naming the saved epochs
    for (const auto& row : rows) {
      if (row.epoch == epoch) r.file = train::export_checkpoint(run, row, out);
    }
  });
}

RunDiagnosis diagnose_run(const std::string& db, const std::string& ref,
                          const train::DiagnoseOptions& options) {
  return on_run<RunDiagnosis>(db, ref, [&](store::Store& store, const train::RunInput& run,
                                           RunDiagnosis& r) {
    train::check_options(options);
    const auto checkpoint = train::pick_checkpoint(run, store.epochs(run.id), options);
    r.diagnosis = train::diagnose(run, checkpoint, options);
    store.record_diagnosis(r.diagnosis);
    r.by_severity = train::rows_by_severity(r.diagnosis);
    r.first_divergence = train::first_divergence(r.diagnosis);
    r.fp8_slots = train::worst_fp8_rows(r.diagnosis);
  });
}

GcReport collect_garbage(const std::string& db, bool dry_run) {
  store::Store store = open_existing(db);
  return collect_garbage(store, dry_run);
}

}  // namespace amptune::app
