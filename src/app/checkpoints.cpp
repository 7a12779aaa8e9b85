#include "app/checkpoints.h"

#include "app/inspect.h"

namespace amptune::app {
namespace {

// Opens `db`, looks run `ref` up into Result::run, and lets `work(store, result)` fill the rest.
template <typename Result, typename Work>
Result on_run(const std::string& db, const std::string& ref, const Work& work) {
  store::Store store = open_existing(db);
  Result result;
  result.run = find_run(store, ref);
  work(store, result);
  return result;
}

}  // namespace

RunEvaluation evaluate_run(const std::string& db, const std::string& ref,
                           const train::EvalOptions& options) {
  return on_run<RunEvaluation>(db, ref, [&](store::Store& store, RunEvaluation& r) {
    r.epochs = train::evaluate_checkpoints(store, r.run, options);
  });
}

RunExport export_run(const std::string& db, const std::string& ref, int epoch,
                     const std::string& out) {
  return on_run<RunExport>(db, ref, [&](store::Store& store, RunExport& r) {
    r.file = train::export_checkpoint(store, r.run, epoch, out);
  });
}

RunDiagnosis diagnose_run(const std::string& db, const std::string& ref,
                          const train::DiagnoseOptions& options) {
  return on_run<RunDiagnosis>(db, ref, [&](store::Store& store, RunDiagnosis& r) {
    r.diagnosis = train::diagnose(store, r.run, options);
    r.by_severity = train::rows_by_severity(r.diagnosis);
    r.first_divergence = train::first_divergence(r.diagnosis);
  });
}

train::GcReport collect_garbage(const std::string& db, bool dry_run) {
  store::Store store = open_existing(db);
  return train::collect_garbage(store, dry_run);
}

}  // namespace amptune::app
