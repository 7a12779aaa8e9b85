#include "store/records.h"

#include <string>

#include "core/name_table.h"

namespace amptune::store {

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kPending: return "pending";
    case RunStatus::kRunning: return "running";
    case RunStatus::kDone: return "done";
    case RunStatus::kFailed: return "failed";
    case RunStatus::kDiverged: return "diverged";
    case RunStatus::kPruned:
      return "pruned";
  }
  throw StoreError("unknown run status value " + std::to_string(static_cast<int>(status)));
}

RunStatus parse_status(const std::string& text) {
  if (text == "pending") return RunStatus::kPending;
  if (text == "running") return RunStatus::kRunning;
  if (text == "done") return RunStatus::kDone;
  if (text == "failed") return RunStatus::kFailed;
  if (text == "diverged") return RunStatus::kDiverged;
  if (text == "pruned") return RunStatus::kPruned;
  throw StoreError("unknown run status '" + text +
                   "'; expected pending, running, done, failed, diverged or pruned");
}

namespace {

const NameTable<TuneStatus, 3> kTuneStatus = {{{TuneStatus::kSearching, "searching"},
                                               {TuneStatus::kAnswered, "answered"},
                                               {TuneStatus::kExhausted, "exhausted"}}};
const NameTable<TuneRoundKind, 5> kRoundKind = {{{TuneRoundKind::kSearch, "search"},
                                                 {TuneRoundKind::kUnion, "union"},
                                                 {TuneRoundKind::kBisect, "bisect"},
                                                 {TuneRoundKind::kConfirm, "confirm"},
                                                 {TuneRoundKind::kReference, "reference"}}};
const NameTable<CandidateOutcome, 6> kOutcome = {{{CandidateOutcome::kPending, "pending"},
                                                  {CandidateOutcome::kWithin, "within"},
                                                  {CandidateOutcome::kOutside, "outside"},
                                                  {CandidateOutcome::kPruned, "pruned"},
                                                  {CandidateOutcome::kDiverged, "diverged"},
                                                  {CandidateOutcome::kFailed, "failed"}}};
const NameTable<PruneAction, 2> kPruneAction = {
    {{PruneAction::kStop, "stop"}, {PruneAction::kContinue, "continue"}}};

const NameTable<DiagnosticKind, 3> kDiagnosticKind = {{{DiagnosticKind::kForward, "forward"},
                                                       {DiagnosticKind::kGradient, "gradient"},
                                                       {DiagnosticKind::kCast, "cast"}}};

}  // namespace

std::string to_string(TuneStatus value) { return name_in(kTuneStatus, value); }
std::string to_string(TuneRoundKind value) { return name_in(kRoundKind, value); }
std::string to_string(CandidateOutcome value) { return name_in(kOutcome, value); }
std::string to_string(PruneAction value) { return name_in(kPruneAction, value); }
std::string to_string(DiagnosticKind value) { return name_in(kDiagnosticKind, value); }
std::optional<TuneStatus> parse_tune_status(const std::string& text) {
  return value_in(kTuneStatus, text);
}
std::optional<TuneRoundKind> parse_round_kind(const std::string& text) {
  return value_in(kRoundKind, text);
}
std::optional<CandidateOutcome> parse_outcome(const std::string& text) {
  return value_in(kOutcome, text);
}
std::optional<PruneAction> parse_prune_action(const std::string& text) {
  return value_in(kPruneAction, text);
}
std::optional<DiagnosticKind> parse_diagnostic_kind(const std::string& text) {
  return value_in(kDiagnosticKind, text);
}

}  // namespace amptune::store
