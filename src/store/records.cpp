#include "store/records.h"

#include <array>
#include <string>
#include <utility>

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

template <class E, size_t N>
using Names = std::array<std::pair<E, const char*>, N>;

const Names<TuneStatus, 3> kTuneStatus = {{{TuneStatus::kSearching, "searching"},
                                           {TuneStatus::kAnswered, "answered"},
                                           {TuneStatus::kExhausted, "exhausted"}}};
const Names<TuneRoundKind, 5> kRoundKind = {{{TuneRoundKind::kSearch, "search"},
                                             {TuneRoundKind::kUnion, "union"},
                                             {TuneRoundKind::kBisect, "bisect"},
                                             {TuneRoundKind::kConfirm, "confirm"},
                                             {TuneRoundKind::kReference, "reference"}}};
const Names<CandidateOutcome, 6> kOutcome = {{{CandidateOutcome::kPending, "pending"},
                                              {CandidateOutcome::kWithin, "within"},
                                              {CandidateOutcome::kOutside, "outside"},
                                              {CandidateOutcome::kPruned, "pruned"},
                                              {CandidateOutcome::kDiverged, "diverged"},
                                              {CandidateOutcome::kFailed, "failed"}}};
const Names<PruneAction, 2> kPruneAction = {
    {{PruneAction::kStop, "stop"}, {PruneAction::kContinue, "continue"}}};

template <class E, size_t N>
std::string name_in(const Names<E, N>& names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  throw StoreError("no name for value " + std::to_string(static_cast<int>(value)));
}

template <class E, size_t N>
std::optional<E> value_in(const Names<E, N>& names, const std::string& text) {
  for (const auto& [v, name] : names) {
    if (text == name) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string to_string(TuneStatus value) { return name_in(kTuneStatus, value); }
std::string to_string(TuneRoundKind value) { return name_in(kRoundKind, value); }
std::string to_string(CandidateOutcome value) { return name_in(kOutcome, value); }
std::string to_string(PruneAction value) { return name_in(kPruneAction, value); }
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

}  // namespace amptune::store
