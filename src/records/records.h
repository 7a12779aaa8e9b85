// The records the results database stores and returns (store.h): runs and what created them,
// epochs, loss-scale events, diagnoses, merge reports. Plain values; the Store reads and writes
// them, and the error a write of a run by a process that lost its claim raises. Timestamps are
// ISO-8601 UTC text, "" when unset; NaN doubles are stored as NULL.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/process.h"
#include "core/tune_words.h"
#include "core/words.h"

namespace amptune::records {

// A write by a process that no longer holds the run: another process claimed it (this one was
// presumed dead). Nothing was written; the caller stops working on the run.
class ClaimLostError : public StoreError {
 public:
  using StoreError::StoreError;
};

// --- Runs ----------------------------------------------------------------------------------------

// kPruned: a sweep's prune: rule stopped the run early (docs/PRUNING.md); it keeps its
// checkpoints and continues when the rule (or --no-prune) lets it.
enum class RunStatus { kPending, kRunning, kDone, kFailed, kDiverged, kPruned };
// Every status, in the order tables show them.
inline constexpr RunStatus kRunStatuses[] = {RunStatus::kPending, RunStatus::kRunning,
                                             RunStatus::kDone,    RunStatus::kFailed,
                                             RunStatus::kDiverged, RunStatus::kPruned};
std::string to_string(RunStatus status);
RunStatus parse_status(const std::string& text);  // throws StoreError on an unknown word

// What a status says about the run's training: the one place that groups statuses (every reader
// asks these; none lists statuses itself).
// - complete: its training has ended for good: done (every epoch) or diverged (it cannot go on).
//   A sweep skips it; resuming it without --from-epoch trains nothing.
// - settled: ended by a rule, not cut short: complete, or pruned (the prune rule stopped it; it
//   continues only when promoted or under --no-prune). Of two copies of a run with the same
//   epochs, merge keeps the settled one.
// - finished: neither pending nor running: settled, or failed. A search waiting for the run stops.
bool is_complete(RunStatus status);
bool is_settled(RunStatus status);
bool is_finished(RunStatus status);

// --- Enum-like columns ---------------------------------------------------------------------------
// Each has one table of its names (records.cpp), which the store writes and reads and the
// commands print: to_string(value), and parse_*(text), unset for a word not in the table.

enum class TuneStatus { kSearching, kAnswered, kExhausted };  // tune_searches.status
// tune_rounds.kind (docs/TUNE.md): the search's rounds, the union of moves that helped, the
// bisection's probes, the answer from scratch, the reference's seed repeats (round 0).
enum class TuneRoundKind { kSearch, kUnion, kBisect, kConfirm, kReference };
// tune_candidates.outcome: how a candidate's curve ended (app/tune/tune_rules.h judge).
enum class CandidateOutcome { kPending, kWithin, kOutside, kPruned, kDiverged, kFailed };
enum class PruneAction { kStop, kContinue };  // prune_decisions.action
// diagnostics.kind: a module's output, a parameter's gradient, an int32 cast point's values.
enum class DiagnosticKind { kForward, kGradient, kCast };
// diagnosis_advice.rule: the advice rules of amptune diagnose (docs/AMP.md "Advice rules"), in
// their priority order; made by train/diagnose.cpp, turned into moves by app/tune/tune_rules.cpp.
// The last four are FP8's (docs/AMP.md "FP8 advice rules", train/diagnose_fp8.cpp): keep a
// module out of FP8 (amp.fp8.skip_modules), current scaling, a larger margin, a shorter amax
// history.
enum class AdviceRule {
  kActivationOverflow,
  kGradientUnderflow,
  kGradientOverflow,
  kBatchnormLowPrecision,
  kFirstDeparture,
  kCastPoint,
  kFp8KeepOut,
  kFp8CurrentScaling,
  kFp8RaiseMargin,
  kFp8ShortenHistory
};
// Every advice rule, in priority order.
inline constexpr AdviceRule kAdviceRules[] = {
    AdviceRule::kActivationOverflow, AdviceRule::kGradientUnderflow,
    AdviceRule::kGradientOverflow,   AdviceRule::kBatchnormLowPrecision,
    AdviceRule::kFirstDeparture,     AdviceRule::kCastPoint,
    AdviceRule::kFp8KeepOut,         AdviceRule::kFp8CurrentScaling,
    AdviceRule::kFp8RaiseMargin,     AdviceRule::kFp8ShortenHistory};
// The config's words that are columns too (opt_level, dtype, prune rule, loss-scale reason) are
// enum classes of core/words.h, shared with the layers below the store.

std::string to_string(TuneStatus value);
std::string to_string(TuneRoundKind value);
std::string to_string(CandidateOutcome value);
std::string to_string(PruneAction value);
std::string to_string(DiagnosticKind value);
std::string to_string(AdviceRule value);  // "activation_overflow", "gradient_underflow", ...
std::optional<TuneStatus> parse_tune_status(const std::string& text);
std::optional<TuneRoundKind> parse_round_kind(const std::string& text);
std::optional<CandidateOutcome> parse_outcome(const std::string& text);
std::optional<PruneAction> parse_prune_action(const std::string& text);
std::optional<DiagnosticKind> parse_diagnostic_kind(const std::string& text);
std::optional<AdviceRule> parse_advice_rule(const std::string& text);

// Where a fork starts: another run's checkpoint of one epoch, with changed settings.
struct ForkOrigin {
  int64_t parent_run_id = 0;
  int parent_epoch = 0;         // the parent's epoch whose checkpoint the fork starts from
  std::string overrides_json;   // JSON object: key -> new value
  std::string changes;          // readable: "amp.loss_scale: 128 -> \"dynamic\""
  bool reset_optimizer = false; // only the weights were taken over
};

// What a cell is, as the sweep expansion produced it.
struct RunSpec {
  std::string sweep_name;
  int cell_index = 0;
  std::string label;        // Cell::label()
  std::string config_json;  // canonical nested JSON (Config::canonical_json)
  std::string config_hash;  // the run's identity (run_identity / fork_identity), sha256 hex
  // The fingerprint of the data the run reads (train::data_fingerprint) that config_hash
  // includes; "" when not known.
  std::string data_fingerprint;
  // The identity the run had before data fingerprints (Config::hash alone, migration 12): a run
  // recorded with it and no fingerprint is this run. "" for forks, whose identity has no data
  // part while their data are their parent's.
  std::string config_key;
  std::string axes_json;    // {"optim.lr": 0.1}
  // Readable columns copied from the config (runs.model, runs.opt_level, ...): column -> value.
  // The values are JSON scalars/arrays as text (e.g. "0.1", "\"resnet18\"", "[17]").
  // Keys must be setting columns of the runs table (Store::setting_columns(): model, dataset,
  // optimizer, lr, batch_size, epochs, lr_dec_epoch, seed, primary_metric, opt_level, dtype,
  // loss_scale, backend, and whatever later migrations add); an unknown key is a StoreError.
  // "primary_metric" picks the metric the views rank the run by (default acc1).
  std::map<std::string, std::string> columns;
  // A fork (amptune fork / sweep `forks:`): its parent must be a run of the same sweep.
  std::optional<ForkOrigin> fork;
  // The per-epoch metrics the run's model records and whether higher is better for each
  // (train::recorded_metrics): written to metric_info, which every reader ranks by (views,
  // list, compare, report, serve). A name metric_info holds with the other direction is a
  // ConfigError: a metric name has one direction in a database.
  std::map<std::string, bool> metric_directions;
};

// Why `name` cannot be the name of a metric a model records (empty when it can): not a
// lowercase identifier [a-z][a-z0-9_]* of at most 64 characters, a column of the epochs table
// (train_loss, lr, epoch, ...: the metrics table's CHECK, migration 1, refuses these too), or a
// metric amptune records itself beside every model's (val_samples, train_images, loss_scale,
// ...: amptune_metric_names). A custom model's names are checked when its sweep is planned.
std::string metric_name_problem(const std::string& name);
// The metrics amptune records itself into a run's metrics rows, whatever the model.
const std::vector<std::string>& amptune_metric_names();

struct Provenance {
  std::string amptune_version;
  std::string git_commit;
  bool git_dirty = false;
  std::string torch_version;
  std::string host;
  int threads = 1;
  std::string device;
  std::string command_line;
  // Data-parallel training (docs/DISTRIBUTED.md): processes that train the run, and the batch
  // of one optimizer step over all of them (data.batch_size x world_size).
  int world_size = 1;
  int64_t global_batch = 0;
  std::string allocator;  // the malloc of the process (allocator_name(): tcmalloc, glibc, ...)
  std::string blas;       // the BLAS serving its matmuls (core/blas.h blas_name(); migration 20)
};

// A run's distance to the hardware limit (runs columns of migration 19; docs/PERFORMANCE.md
// "MFU"). The training FLOPs of one sample are the config's; the peak is that of the devices of
// the run's latest start (a resume elsewhere replaces it).
struct RunWork {
  double train_flops_per_sample = 0;  // forward multiply-accumulates x 2 x 3; 0: not counted
  double peak_flops = 0;              // FLOP/s of the job (one device's x world size); 0: unknown
  std::string peak_precision;         // "fp32" | "fp16" | "bf16": the arithmetic of the peak
  std::string peak_source;            // how the peak was found ("cpu: 2 cores x ...", ...)
  // Ops of the forward pass whose products the count cannot see (train/diagnose.h ForwardWork::
  // uncounted, comma-separated; migration 20): "" when every product was counted, else the
  // FLOPs and the MFU are lower bounds.
  std::string uncounted_ops = {};  // (an initializer: the 4-field aggregates stay complete)
  // The share of the peak that `img_per_s` (the job's train img/s) achieves; unset when either
  // figure is unknown or no image was trained.
  std::optional<double> mfu(double img_per_s) const {
    if (train_flops_per_sample <= 0 || peak_flops <= 0 || !(img_per_s > 0)) return std::nullopt;
    return img_per_s * train_flops_per_sample / peak_flops;
  }
};

struct RunRow {
  int64_t id = 0;
  int64_t sweep_id = 0;
  std::string sweep_name;
  std::string name;  // "<sweep>/<cell_index>-<hash8>", unique
  int cell_index = 0;
  std::string label;
  RunStatus status = RunStatus::kPending;
  std::string config_json;
  std::string config_hash;
  std::string data_fingerprint;    // "" when not known (runs recorded before migration 12)
  std::string legacy_config_hash;  // the identity before migration 12 re-hashed it ("" if same)
  std::string axes_json;
  int epochs_done = 0;         // number of recorded epochs (max epoch + 1), 0 when none
  std::string message;         // failure / divergence reason
  std::string summary_json;    // the final JSON line
  std::string started_at, finished_at, heartbeat_at;  // ISO-8601 UTC, "" when unset
  std::string created_at;
  std::string primary_metric;  // "acc1" unless RunSpec::columns said otherwise
  Provenance provenance;       // of the last mark_running / claim_run (empty before)
  // The process that claimed the run last (mark_running / claim_run); unset before.
  std::optional<ProcessIdentity> holder;
  // The non-NULL setting columns as JSON text, as RunSpec::columns wrote them (numbers may be
  // re-spelled: "1e-1" reads back as "0.1"; columns declared BOOLEAN read back as true/false).
  std::map<std::string, std::string> columns;
  std::optional<ForkOrigin> fork;  // set for forks
  RunWork work;                    // zeros and "" until the run's first start (migration 19)
};

// --- Epochs --------------------------------------------------------------------------------------

struct CheckpointFile {
  std::string path;
  int64_t bytes = 0;
  std::string sha256;
};

// A loss-scale change (or the initial scale) at a step of the epoch it belongs to.
struct ScaleEvent {
  int64_t global_step = 0;  // optimizer steps done when the new scale took effect
  double scale = 0;         // the new scale
  ScaleReason reason = ScaleReason::kInit;
};

// Where an epoch's time went, in seconds (docs/PERFORMANCE.md "Time breakdown"; columns of
// migration 10). The training steps' wall time is split into waiting for the loader, forward
// (model + loss + loss.item()), backward (loss scaling, backward pass, unscale and overflow
// check) and the optimizer step (masters, scaler update); evaluation is the whole evaluation
// pass. These lie inside epoch_seconds; the checkpoint write and the database write come after
// it. db is this epoch's record_epoch + retention, written by Store::set_epoch_db_seconds once
// they are done. startup: what the run spent before its first training step: the process's age
// for the first run a process trains, the time since the run began for later ones (negative:
// not the run's first epoch in this process).
struct EpochTimes {
  double data_wait = 0, forward = 0, backward = 0, optimizer = 0, eval = 0, checkpoint = 0;
  double db = -1;       // negative: not measured (yet)
  double startup = -1;  // negative: not the run's first epoch in this process

  // The measured phases inside epoch_seconds; the rest of it is the runner's own work.
  double inside_epoch() const { return data_wait + forward + backward + optimizer + eval; }
};

// One finished epoch, written in one transaction (epoch row, metrics, loss-scale events,
// checkpoint). An epoch with global_step 0 is the evaluation of the initial weights of an
// evaluation-only run (schedule.epochs: 0): no training values (NaN: NULL), no checkpoint.
struct EpochRecord {
  int64_t run_id = 0;
  int epoch = 0;  // 0-based
  int64_t global_step = 0;  // steps done at the end of this epoch
  double lr = 0;
  double train_loss = 0;
  double train_fps_mean = 0, train_fps_min = 0, train_fps_max = 0;
  double epoch_seconds = 0;
  int64_t skipped_samples = 0;  // corrupt / unreadable inputs skipped this epoch
  std::map<std::string, double> metrics;  // acc1, acc5, val_loss, loss_scale, ...
  std::optional<CheckpointFile> checkpoint;
  std::vector<ScaleEvent> scale_events;  // rows of loss_scale_events for this epoch
  // When not empty, replaces the run's initial_metrics in the same transaction (an
  // evaluation-only run records its one evaluation as both).
  std::map<std::string, double> initial_metrics;
  std::optional<EpochTimes> times;       // absent: not measured (NULL columns)
  std::string profile_trace;             // Chrome-trace JSON of profile.steps; "" = none
};

struct EpochRow {
  int epoch = 0;
  int64_t global_step = 0;
  double lr = 0, train_loss = 0, train_fps_mean = 0, train_fps_min = 0, train_fps_max = 0;
  double epoch_seconds = 0;
  int64_t skipped_samples = 0;
  std::map<std::string, double> metrics;
  std::optional<CheckpointFile> checkpoint;  // present while the file is kept
  std::string recorded_at;
  std::optional<EpochTimes> times;  // absent for epochs recorded without a breakdown
  std::string profile_trace;        // "" = none
};

// The metrics that are columns of `epochs` rather than rows of `metrics`, which every reader of
// a metric by name asks (compare, report, the query side); schemas/store.sql's views name the
// same four (epoch_values, best_epoch; StoreTest.EpochColumnMetricsAreTheViewsOwn keeps them in
// step).
inline constexpr const char* kEpochColumnMetrics[] = {"train_loss", "lr", "train_fps_mean",
                                                      "epoch_seconds"};
bool is_epoch_column_metric(const std::string& metric);
// The value of `metric` in `row`: its column (kEpochColumnMetrics) or its entry of row.metrics;
// NaN when the run did not record it.
double epoch_value(const EpochRow& row, const std::string& metric);

// --- Diagnoses (amptune diagnose; migration 8, docs/AMP.md "Diagnosing a precision setting") -

// One compared tensor of one batch (see the diagnostics table in schemas/store.sql). NaN is
// stored as NULL.
struct DiagnosticRow {
  DiagnosticKind kind = DiagnosticKind::kForward;
  int batch = 0;
  int seq = 0;       // execution / parameter / cast-point order
  std::string module;
  TensorDtype dtype = TensorDtype::kFp32;
  int64_t numel = 0;
  double cosine = 0, max_abs_err = 0, max_rel_err = 0, frac_rel_err_1e3 = 0,
         frac_rel_err_5e3 = 0, overflow_frac = 0, underflow_frac = 0;
  // Forward rows: the share of the module's input that was inf/NaN under the run's policy (0: an
  // overflow there starts there); NaN for the other kinds or when not known (migration 17).
  double input_nonfinite_frac = 0;
};

// One FP8 quantisation of one batch's pass (a run with amp.fp8.enabled; table fp8_diagnostics,
// migration 22): a GEMM operand of a module in its role, quantised with the scale its slot
// gave, against its fp32 value. NaN is stored as NULL.
struct Fp8DiagnosticRow {
  int batch = 0;
  int seq = 0;             // the order of the pass's quantisations
  std::string module;      // the slot key: the module's name, "#k" for its k-th GEMM in a call
  std::string role;        // "input" | "weight" | "grad_output" (amp::to_string(Fp8Role))
  std::string format;      // "e4m3" | "e5m2" (amp::to_string(Fp8Format))
  int64_t numel = 0;
  double saturated_frac = 0;  // share of the values with |x * scale| beyond the format's max
  double flushed_frac = 0;    // share of the nonzero values that quantise to 0
  double sqnr_db = 0;         // 10 log10(sum x^2 / sum (x - dequantised)^2); NaN: exact
  double amax = 0;            // max |x| of this tensor (its finite values)
  double scale = 1;           // the scale it was quantised with
  // The slot's amax history (the steps before this one) when it was quantised: its smallest
  // and largest entry and its length (0: empty, min and max NaN).
  double history_min = 0, history_max = 0;
  int64_t history_len = 0;
};

struct DiagnosisAdvice {
  AdviceRule rule = AdviceRule::kFirstDeparture;
  std::string module;
  std::string advice;
};

struct Diagnosis {
  int64_t run_id = 0;
  int epoch = 0;  // the checkpoint's epoch; -1 = initial weights
  OptLevel against = OptLevel::kO0;  // the reference's opt level
  int batches = 0;
  double cosine_min = 0.99;
  double loss_scale = 0;
  double seconds = 0;
  std::vector<DiagnosticRow> rows;
  std::vector<Fp8DiagnosticRow> fp8_rows;  // empty unless the run computes in FP8
  std::vector<DiagnosisAdvice> advice;
};

// --- Pruning (docs/PRUNING.md) ------------------------------------------------------------------

// A decision of a sweep's prune: rule about one run (table prune_decisions): why it stopped, or
// why a stopped run continued (promoted by asha, --no-prune, a changed rule), with the evidence.
struct PruneDecisionRow {
  int64_t run_id = 0;
  int epoch = 0;         // the epoch decided at (0-based; the run's last recorded one)
  PruneAction action = PruneAction::kStop;
  PruneRule rule = PruneRule::kNone;
  std::string metric;    // the metric compared
  int rung = -1;         // asha: the rung's index k (it stands after grace * eta^k epochs); -1
  double value = 0;      // the run's value (NaN: none or not finite)
  double threshold = 0;  // the value it had to reach (NaN: none)
  std::string compared_json = "[]";  // [{"run_id": 3, "value": 0.41}, ...], best first
  std::string reason;                // one line for people
  std::string decided_at;            // ISO-8601 UTC; set by the store
};

// --- Tuning (amptune tune; docs/TUNE.md) -------------------------------------------------------

// A search (table tune_searches): one per sweep and tune: block.
struct TuneSearchRow {
  int64_t id = 0;
  int64_t sweep_id = 0;
  std::string sweep_name;  // read back; not written
  std::string block_json;  // the tune: block as canonical JSON
  std::string metric;
  bool higher_is_better = true;
  int64_t reference_run_id = 0, start_run_id = 0;
  TuneStatus status = TuneStatus::kSearching;
  int64_t answer_run_id = 0;         // 0: none
  std::string answer_yaml;           // the answer's changed keys, one "key: value" line each
  double answer_value = std::numeric_limits<double>::quiet_NaN();
  double reference_value = std::numeric_limits<double>::quiet_NaN();
  int epochs_spent = 0, grid_epochs = 0;
  std::string note;  // how it ended, for people
  std::string created_at, finished_at;
};

// A round (table tune_rounds): candidates made from one start run.
struct TuneRoundRow {
  int64_t search_id = 0;
  int round = 0;                // 1, 2, ...
  TuneRoundKind kind = TuneRoundKind::kSearch;
  int64_t start_run_id = 0;
  int fork_epoch = -1;                 // -1: the candidates are fresh runs
  std::optional<int> diagnosis_epoch;  // the start's diagnosed checkpoint (-1: initial weights)
  std::string note;
};

// A candidate (table tune_candidates): one move over its round's start, and its run.
struct TuneCandidateRow {
  int64_t search_id = 0;
  int round = 0;
  int seq = 0;
  std::optional<TuneMoveKind> move;  // unset: the search's start (round 0's node, not stored)
  std::string change_json = "{}";  // the keys it changes over the round's start
  std::string reason;
  std::optional<AdviceRule> advice_rule;  // the advice row it came from; unset: the move order
  std::string advice_module;              // "" when the move came from the order
  int64_t run_id = 0;
  int64_t parent_run_id = 0;  // 0: a fresh run
  int fork_epoch = -1;
  int rung = -1;  // the last rung reached; -1 none
  double value = std::numeric_limits<double>::quiet_NaN();
  double reference_value = std::numeric_limits<double>::quiet_NaN();
  CandidateOutcome outcome = CandidateOutcome::kPending;
};

// A Slurm array task of `amptune tune --slurm` (table tune_jobs): it trains run_id to `epoch`
// in the database task_db, whose output goes to log_path. ended_at "": in flight.
struct TuneJobRow {
  int64_t search_id = 0;
  int64_t run_id = 0;
  int epoch = 0;
  int attempt = 1;     // 2: the task was submitted again after the first did not get there
  std::string job_id;  // Slurm's array job id
  int task = 0;        // the array task index
  std::string task_db, log_path;
  std::string state = "SUBMITTED";  // the last job state seen, Slurm's word
  std::string submitted_at, ended_at;
};

// --- Merging databases (amptune merge; docs/DATABASE.md "Merging databases") ------------------

// The same cell (sweep name + config hash) in two databases with different contents: which copy
// was kept.
struct MergeConflict {
  std::string run;                          // the kept copy's name
  std::string kept_from, dropped_from;      // database paths
  int kept_epochs = 0, dropped_epochs = 0;  // recorded epochs of each copy
  std::string kept_status, dropped_status;
};

// What merging one input did to the target.
struct MergeCount {
  std::string path;
  int schema_version = 0;  // of the input
  int sweeps_added = 0;
  int runs_added = 0;      // cells the target did not have
  int runs_replaced = 0;   // the input's copy replaced the target's (a MergeConflict)
  int runs_kept = 0;       // the target's copy stayed (a MergeConflict)
  int runs_unchanged = 0;  // the target had this very copy (merged before)
  int64_t epochs = 0;      // epoch rows copied
};

// Where a database's runs keep their checkpoint files, as train (which writes them) says
// (train/checkpoint_layout.h checkpoint_layout(), given by app); merge takes over an input's
// recorded path only when it lies in one of its run's folders and has such a name
// (docs/SECURITY.md "Databases from elsewhere").
struct CheckpointLayout {
  // The folders run `run_id` of the database at `db_path`, whose stored config is `config_json`
  // (runs.config_json, any text), may keep its checkpoints in.
  std::function<std::vector<std::string>(const std::string& db_path, int64_t run_id,
                                         const std::string& config_json)>
      run_dirs;
  // Whether `file_name` (without its folder) is the name of a run's checkpoint.
  std::function<bool(const std::string& file_name)> is_checkpoint_name;
};

struct MergeReport {
  std::vector<MergeCount> inputs;  // in input order
  std::vector<MergeConflict> conflicts;
  int64_t checkpoints = 0;          // kept checkpoint references copied
  int64_t missing_checkpoints = 0;  // of those, files not found from the working directory
  std::string first_missing;        // one of them, for the message
  // References the merge did not take over as checkpoints (marked deleted in the target, their
  // epoch's metrics kept): paths outside the input run's own checkpoint folder (its
  // checkpoint.dir or the input database's default root, then the input run id) or not named
  // epoch_N..., which no checkpoint amptune writes is. Nothing ever loads or deletes them.
  int64_t foreign_checkpoints = 0;
  std::string first_foreign;        // one of them, for the message
};

}  // namespace amptune::records
