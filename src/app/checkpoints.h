// The saved checkpoints of runs (`amptune eval`, `export`, `diagnose`, `gc`): each opens the
// existing results database `db` (app::open_existing), looks RUN up by id or name
// (app::find_run) and does the work in train/ (evaluate.h, diagnose.h, retention.h: torch-free
// headers). Plain data back; the command prints it. No torch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/store.h"
#include "train/diagnose.h"
#include "train/evaluate.h"
#include "train/retention.h"

namespace amptune::app {

// `amptune eval`: train::evaluate_checkpoints of run `ref`.
struct RunEvaluation {
  store::RunRow run;
  std::vector<train::EpochEvaluation> epochs;  // ascending
};
RunEvaluation evaluate_run(const std::string& db, const std::string& ref,
                           const train::EvalOptions& options);

// `amptune export`: train::export_checkpoint of run `ref`'s epoch `epoch` to `out`.
struct RunExport {
  store::RunRow run;
  train::ExportResult file;
};
RunExport export_run(const std::string& db, const std::string& ref, int epoch,
                     const std::string& out);

// `amptune diagnose`: train::diagnose of run `ref` (recorded), with its rows in the order to
// show them (train::rows_by_severity) and its first departing module (train::first_divergence).
struct RunDiagnosis {
  store::RunRow run;
  store::Diagnosis diagnosis;
  std::vector<store::DiagnosticRow> by_severity;
  std::optional<store::DiagnosticRow> first_divergence;
};
RunDiagnosis diagnose_run(const std::string& db, const std::string& ref,
                          const train::DiagnoseOptions& options);

// `amptune gc`: train::collect_garbage of the database `db`.
train::GcReport collect_garbage(const std::string& db, bool dry_run);

}  // namespace amptune::app
