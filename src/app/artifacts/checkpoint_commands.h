// The saved checkpoints of runs (`amptune eval`, `export`, `diagnose`, `gc`): each opens the
// existing results database `db` (app::open_existing), looks RUN up by id or name
// (app::find_run), picks the checkpoints from the run's rows, lets train/ compute (evaluate.h,
// diagnose.h: torch-free headers) and records the results. Plain data back; the command prints
// it. No torch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/artifacts/checkpoint_folders.h"
#include "store/store.h"
#include "train/diagnose.h"
#include "train/diagnose_fp8.h"
#include "train/evaluate.h"

namespace amptune::app {

// `amptune eval`: the checkpoints of run `ref` that `options` selects (train::checkpoint_epochs)
// evaluated on the run's evaluation split (train::CheckpointEvaluator), each epoch's metrics
// recorded with Store::record_metrics (replacing those metric names, other metrics untouched)
// unless they would replace metrics computed on another set (EvalOptions::replace). A checkpoint
// that is missing or corrupt is reported in its EpochEvaluation::error and the others are still
// evaluated.
struct RunEvaluation {
  records::RunRow run;
  std::vector<train::EpochEvaluation> epochs;  // ascending
};
RunEvaluation evaluate_run(const std::string& db, const std::string& ref,
                           const train::EvalOptions& options);

// `amptune export`: train::export_checkpoint of run `ref`'s epoch `epoch` to `out`.
struct RunExport {
  records::RunRow run;
  train::ExportResult file;
};
RunExport export_run(const std::string& db, const std::string& ref, int epoch,
                     const std::string& out);

// `amptune diagnose`: train::diagnose of run `ref` at the checkpoint train::pick_checkpoint
// chooses, recorded (replacing an earlier diagnosis of the same checkpoint), with its rows in the
// order to show them (train::rows_by_severity), its first departing module
// (train::first_divergence) and, for a run in FP8, one row per slot and role
// (train::worst_fp8_rows).
struct RunDiagnosis {
  records::RunRow run;
  records::Diagnosis diagnosis;
  std::vector<records::DiagnosticRow> by_severity;
  std::optional<records::DiagnosticRow> first_divergence;
  std::vector<records::Fp8DiagnosticRow> fp8_slots;
};
RunDiagnosis diagnose_run(const std::string& db, const std::string& ref,
                          const train::DiagnoseOptions& options);

// `amptune gc`: collect_garbage (app/artifacts/checkpoint_folders.h) of the database `db`.
GcReport collect_garbage(const std::string& db, bool dry_run);

}  // namespace amptune::app
