// Looking at the runs of a results database (`amptune list`, `amptune show`), and the one lookup
// of a run by id or name that every command naming a RUN goes through (show, resume, fork, eval,
// export, diagnose). Plain data; the command formats it. No torch.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/views/status.h"
#include "app/views/table.h"
#include "store/store.h"

namespace amptune::app {

// Opens the existing results database `db`; a missing file is a StoreError that says to run a
// sweep first or pass --db (commands that read results must not create an empty database).
store::Store open_existing(const std::string& db);
// The existing database `db` read-only (amptune serve): Store::open_read_only, which writes
// nothing, not even a migration.
std::unique_ptr<store::Store> open_read_only(const std::string& db);

// The run `ref` (an id or a name) of `store`. Throws UsageError "no run 'REF' in DB (see amptune
// list --db DB)" when there is none.
records::RunRow find_run(const store::Store& store, const std::string& ref);

// `amptune list`: the runs of the database `db` (or of `sweep`) with their best values
// (list_runs, app/views/status.h).
std::vector<RunLine> list_runs(const std::string& db, const std::optional<std::string>& sweep);

// What a diagnosis found of a run's FP8 (docs/AMP.md "Diagnosing FP8"): the diagnosed epoch
// (-1: the initial weights), one row per slot and role (train::worst_fp8_rows) and the
// diagnosis's advice.
struct Fp8Findings {
  int epoch = 0;
  std::vector<records::Fp8DiagnosticRow> slots;
  std::vector<records::DiagnosisAdvice> advice;
};
// The FP8 rows as a table (diagnose and show print it): module, role, format, saturated %,
// flushed %, SQNR dB, amax, scale, the history's min, max and their ratio.
Table fp8_table(const std::vector<records::Fp8DiagnosticRow>& slots);

// `amptune show`: one run of the database `db` (find_run) with its epochs (ascending), the
// evaluation of its initial weights (empty when it has none), the decisions a prune rule made
// about it, its FP8 recipe in words (amp::Fp8Policy::summary; "" without FP8 or when this build
// cannot read the stored config) and the FP8 findings of its newest diagnosis that has FP8 rows.
struct RunDetails {
  records::RunRow run;
  std::vector<records::EpochRow> epochs;
  std::map<std::string, double> initial_metrics;
  std::vector<records::PruneDecisionRow> prune_decisions;  // oldest first (docs/PRUNING.md)
  std::string fp8_recipe;
  std::optional<Fp8Findings> fp8;
};
RunDetails show_run(const std::string& db, const std::string& ref);
RunDetails show_run(const store::Store& store, const std::string& ref);

}  // namespace amptune::app
