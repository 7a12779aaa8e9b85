#include "records/records.h"

#include <algorithm>
#include <string>

#include "core/name_table.h"

namespace amptune::records {

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

bool is_complete(RunStatus status) {
  return status == RunStatus::kDone || status == RunStatus::kDiverged;
}

bool is_settled(RunStatus status) { return is_complete(status) || status == RunStatus::kPruned; }

bool is_finished(RunStatus status) { return is_settled(status) || status == RunStatus::kFailed; }

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
const NameTable<AdviceRule, 10> kAdviceRule = {
    {{AdviceRule::kActivationOverflow, "activation_overflow"},
     {AdviceRule::kGradientUnderflow, "gradient_underflow"},
     {AdviceRule::kGradientOverflow, "gradient_overflow"},
     {AdviceRule::kBatchnormLowPrecision, "batchnorm_low_precision"},
     {AdviceRule::kFirstDeparture, "first_departure"},
     {AdviceRule::kCastPoint, "cast_point"},
     {AdviceRule::kFp8KeepOut, "fp8_keep_out"},
     {AdviceRule::kFp8CurrentScaling, "fp8_current_scaling"},
     {AdviceRule::kFp8RaiseMargin, "fp8_raise_margin"},
     {AdviceRule::kFp8ShortenHistory, "fp8_shorten_history"}}};

}  // namespace

std::string to_string(TuneStatus value) { return name_in(kTuneStatus, value); }
std::string to_string(TuneRoundKind value) { return name_in(kRoundKind, value); }
std::string to_string(CandidateOutcome value) { return name_in(kOutcome, value); }
std::string to_string(PruneAction value) { return name_in(kPruneAction, value); }
std::string to_string(DiagnosticKind value) { return name_in(kDiagnosticKind, value); }
std::string to_string(AdviceRule value) { return name_in(kAdviceRule, value); }
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
std::optional<AdviceRule> parse_advice_rule(const std::string& text) {
  return value_in(kAdviceRule, text);
}

// --- metric names -------------------------------------------------------------------------

const std::vector<std::string>& amptune_metric_names() {
  // What train/ records into EpochRecord::metrics beside a model's own (trainer.cpp,
  // precision.h, the tasks' evaluation): RecordedMetricsAreKnown (torchscript_test) fails when
  // a run records a name missing here.
  static const std::vector<std::string> names = {
      "val_samples",    "val_skipped_samples", "train_images",  "rank_fps_min",
      "rank_fps_max",   "allreduce_ms",        "allreduce_share", "world_size",
      "loss_scale",     "loss_scale_min",      "loss_scale_max",  "skipped_steps",
      "overflow_steps", "nonfinite_streak",    "train_fps_elapsed"};
  return names;
}

std::string metric_name_problem(const std::string& name) {
  // The columns of epochs, which the metrics table's CHECK (migration 1) keeps out of it.
  static const std::vector<std::string> epoch_columns = {
      "epoch",         "global_step",   "lr",           "train_loss",     "train_fps_mean",
      "train_fps_min", "train_fps_max", "epoch_seconds", "skipped_samples"};
  constexpr size_t kMaxLength = 64;
  if (name.empty() || name.size() > kMaxLength || name[0] < 'a' || name[0] > 'z' ||
      std::any_of(name.begin(), name.end(), [](char c) {
        return !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
      })) {
    return "metric names are lowercase identifiers [a-z][a-z0-9_]* of at most " +
           std::to_string(kMaxLength) + " characters";
  }
  if (std::find(epoch_columns.begin(), epoch_columns.end(), name) != epoch_columns.end()) {
    return name + " is a column of every epoch row, which amptune records itself";
  }
  const auto& own = amptune_metric_names();
  if (std::find(own.begin(), own.end(), name) != own.end()) {
    return name + " is a metric amptune records itself for every run";
  }
  return "";
}

bool is_epoch_column_metric(const std::string& metric) {
  return std::any_of(std::begin(kEpochColumnMetrics), std::end(kEpochColumnMetrics),
                     [&](const char* name) { return metric == name; });
}

double epoch_value(const EpochRow& row, const std::string& metric) {
  if (metric == "train_loss") return row.train_loss;
  if (metric == "lr") return row.lr;
  if (metric == "train_fps_mean") return row.train_fps_mean;
  if (metric == "epoch_seconds") return row.epoch_seconds;
  const auto it = row.metrics.find(metric);
  return it == row.metrics.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

}  // namespace amptune::records
