// The results database: one SQLite file holding sweeps, runs, epochs, metrics, checkpoints.
// Schema and views: schemas/store.sql (compiled in). No torch here.
//
// Concurrency: WAL, busy timeout (10 s), every write one short BEGIN IMMEDIATE transaction that is
// rolled back on any exception. Each Store object owns one connection and is used from one thread;
// several processes may share the file (claim_run decides who trains a run).
//
// Errors: StoreError whose message names the database file and what was being done.
// Timestamps: ISO-8601 UTC with milliseconds ("2024-05-01T12:00:00.123Z"). NaN doubles are
// stored as NULL and read back as NaN. The records it takes and returns: records/records.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/process.h"
#include "records/records.h"

struct sqlite3;

namespace amptune::store {

// Seconds without heartbeat after which a run held by a process on another host is presumed
// dead (the default of --stale-after, and what `amptune status` calls stale).
constexpr double kDefaultStaleAfterSeconds = 60;

// Checks that `path` can be merged: an existing file, an SQLite database that passes PRAGMA
// quick_check, of amptune's schema at a version this build knows (older ones merge by the
// columns they have). Opens it read-only and writes nothing. Returns its schema version. Throws
// StoreError naming the file and what is wrong with it.
int check_merge_input(const std::string& path);

class Store {
 public:
  // Opens (creating if needed) and migrates the database. Throws StoreError naming the file
  // when it is not an SQLite database, cannot be created, or has a newer schema version.
  explicit Store(const std::string& path);
  // An empty database in memory (nothing on disk, gone with the object) that calls itself
  // `name` in path() and in its messages, e.g. "a.sqlite + b.sqlite (merged in memory)".
  static std::unique_ptr<Store> in_memory(const std::string& name);
  // The existing database `path`, read-only (amptune serve): opened with SQLITE_OPEN_READONLY and
  // PRAGMA query_only, so no statement through it can write; never created or migrated. Readers
  // of a WAL database see each commit of the writers, a busy timeout waits out their checkpoints.
  // Throws StoreError naming the file when it is missing, not an amptune database, of an older
  // schema (open it once with a command that writes it, e.g. `amptune status --db FILE`, to
  // migrate it) or of a newer one.
  static std::unique_ptr<Store> open_read_only(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }  // the file, or in_memory's name
  int schema_version() const;
  // This database's random id (32 hex characters, migration 14): what a checkpoint folder's
  // marker names (app/artifacts/checkpoint_folders.h claim_checkpoint_root).
  std::string database_id() const;

  // Creates the sweep or updates its description/yaml; returns its id.
  int64_t ensure_sweep(const std::string& name, const std::string& description,
                       const std::string& yaml_text, const std::string& source_path);

  // The run of this sweep with spec.config_hash (or, recorded before data fingerprints, with
  // spec.config_key and no fingerprint), created as pending when absent (with its run_params rows
  // from axes_json, a JSON object). An existing row keeps its name (with the cell index it was
  // created with) and status; it takes spec.config_json, which differs from its own only in how
  // and where the run executes (schema `identity: never` and `content` keys), and
  // spec.data_fingerprint when it had none. spec.sweep_name, when set, must be the sweep's name.
  records::RunRow ensure_run(int64_t sweep_id, const records::RunSpec& spec);

  std::optional<records::RunRow> find_run(int64_t id) const;
  // By id ("12") or name ("quickstart/0-1a2b3c4d").
  std::optional<records::RunRow> find_run(const std::string& id_or_name) const;
  std::vector<records::RunRow> runs(
      const std::optional<std::string>& sweep_name = std::nullopt) const;
  // A page of runs(sweep_name): at most `limit` from the `offset`th (the live view's paged
  // table, which must not read 100,000 runs for 500); and how many runs the sweep has.
  std::vector<records::RunRow> runs(const std::string& sweep_name, int64_t offset,
                                    int64_t limit) const;
  int64_t run_count(const std::string& sweep_name) const;
  // Every sweep's run count, in one query (sweep name -> runs; a sweep without runs is 0).
  std::map<std::string, int64_t> run_counts() const;

  // Holding a run: mark_running and claim_run make this process (current_process()) the run's
  // holder. From then on heartbeat, record_epoch, finish_run and release_run of that run throw
  // ClaimLostError, writing nothing, when called from any other process: a process whose run was
  // taken over can never write into it again. Runs never claimed (holder unset) accept writes
  // from anyone.

  // status -> running, started_at set when unset, provenance stored, heartbeat now, this
  // process the holder. Unconditional (an explicit request); workers use claim_run.
  void mark_running(int64_t run_id, const records::Provenance& provenance);
  // Atomically moves the run to running as mark_running does, but only when it is pending, or
  // failed and `retry_failed`, or running and its holder is gone:
  //  - a holder in this machine's pid space (ProcessIdentity::machine equal) is gone when its
  //    process no longer exists (process_alive), at once; while it lives it keeps the run
  //    whatever its heartbeat;
  //  - any other holder is presumed gone when its heartbeat is older than `stale_after_seconds`.
  // Returns whether this caller won the run (false: someone else holds it or it is finished). A
  // reclaimed run keeps started_at; message and finished_at are cleared. Throws StoreError when
  // no run has that id.
  // A pruned run is claimable only with `continue_pruned` (the prune rule lets it continue).
  // With `epochs_seen`, only while the run still has that many epochs recorded: a caller that
  // decided to train the run from a row read before (the runner's turn) does not win a run that
  // another process trained meanwhile and put back (stopped at --stop-after-epoch); it reads
  // the run again and decides on what it holds now.
  bool claim_run(int64_t run_id, const records::Provenance& provenance, double stale_after_seconds,
                 bool retry_failed = false, bool continue_pruned = false,
                 std::optional<int> epochs_seen = std::nullopt);
  // The run's training FLOPs per sample and the peak of the devices that train it (RunWork;
  // migration 19), replacing what an earlier start wrote; figures <= 0 and empty texts are stored
  // as NULL. ClaimLostError when another process holds the run.
  void record_run_work(int64_t run_id, const records::RunWork& work);
  // heartbeat_at = now. ClaimLostError when another process holds the run.
  void heartbeat(int64_t run_id);
  // status -> done / failed / diverged with a message (its first log::kMessageBytes kept) and
  // the final summary JSON (pruned: prune_run).
  // ClaimLostError when another process holds the run.
  void finish_run(int64_t run_id, records::RunStatus status, const std::string& message,
                  const std::string& summary_json);

  // status -> pruned with the decision's reason as message, and the decision (action "stop")
  // recorded, in one transaction. ClaimLostError when another process holds the run.
  void prune_run(const records::PruneDecisionRow& decision);
  // A pruned run the rule lets continue: status pruned -> pending (message: the reason) and the
  // decision (action "continue") recorded, in one transaction; false, writing nothing, when the
  // run is not pruned (another process promoted it first). StoreError when it does not exist.
  bool promote_run(const records::PruneDecisionRow& decision);
  // A run no process holds now (status pending: stopped at an epoch on purpose) stopped by a
  // decision about it (amptune tune's rungs): status pruned with the decision recorded, in one
  // transaction, whoever held it last; false, writing nothing, when it is not pending (another
  // process pruned it first).
  bool prune_pending_run(const records::PruneDecisionRow& decision);
  // The run's decisions, oldest first.
  std::vector<records::PruneDecisionRow> prune_decisions(int64_t run_id) const;

  // --- Tuning (amptune tune; docs/TUNE.md). Every write here may be repeated by any process
  // running the same search: a row already there is left as it is (the search is a function of
  // the database, so each process would write the same one).

  // The search of row.sweep_id with row.block_json, created (status searching) when absent;
  // returns it as stored.
  records::TuneSearchRow ensure_tune_search(const records::TuneSearchRow& row);
  // The searches of `sweep`, oldest first.
  std::vector<records::TuneSearchRow> tune_searches(const std::string& sweep) const;
  // Sets status, answer, values, epochs, note and finished_at of search row.id.
  void finish_tune_search(const records::TuneSearchRow& row);
  // Each kept when already there.
  void record_tune_round(const records::TuneRoundRow& round);
  void record_tune_candidate(const records::TuneCandidateRow& candidate);
  // Sets rung, value, reference_value and outcome of the candidate (search_id, round, seq).
  void update_tune_candidate(const records::TuneCandidateRow& candidate);
  std::vector<records::TuneRoundRow> tune_rounds(int64_t search_id) const;          // by round
  std::vector<records::TuneCandidateRow> tune_candidates(int64_t search_id) const;  // by round, seq
  // The Slurm array tasks of `tune --slurm` (table tune_jobs, migration 21): rows recorded
  // together in one transaction (a row of the same key replaced; submitted_at now when empty,
  // in flight), a row's state updated (and ended_at set to now when the given row's ended_at is
  // not empty; an ended row stays ended), and the rows of a search by submission.
  void record_tune_jobs(const std::vector<records::TuneJobRow>& jobs);
  void update_tune_job(const records::TuneJobRow& job);
  std::vector<records::TuneJobRow> tune_jobs(int64_t search_id) const;
  // The advice of the diagnosis of (run_id, epoch) in order; unset when there is none.
  std::optional<std::vector<records::DiagnosisAdvice>> diagnosis_advice(int64_t run_id,
                                                                        int epoch) const;

  // status -> pending with a message ("interrupted in epoch 3"; clipped so too): the run stopped
  // on purpose and continues from its last checkpoint. ClaimLostError when another process has it.
  void release_run(int64_t run_id, const std::string& message);

  // Replaces the epoch row of (run_id, epoch) and its metrics, all or nothing, and advances the
  // run's heartbeat in the same transaction. Metric names are lowercase identifiers and must not
  // be columns of the epochs table (lr, train_loss, ...: use the EpochRecord fields).
  // ClaimLostError (nothing written) when another process holds the run.
  void record_epoch(const records::EpochRecord& record);
  // Sets the db_seconds of an epoch already recorded (the time its record_epoch and retention
  // took, known only after them). ClaimLostError when another process holds the run.
  void set_epoch_db_seconds(int64_t run_id, int epoch, double seconds);
  std::vector<records::EpochRow> epochs(int64_t run_id) const;
  // The epoch rows (without metrics) of the first `max_runs` runs of `sweep`, in the order of
  // runs(sweep), that have an epoch with a time breakdown (EpochTimes) or a profile trace, each
  // run with all its epochs: the report's time bars in one query, not one per run.
  std::vector<std::pair<int64_t, std::vector<records::EpochRow>>> timed_epochs(
      const std::string& sweep, size_t max_runs) const;
  // The evaluation of the run's initial weights (table initial_metrics, migration 9): replaces
  // every value the run had there, in one transaction. Names as in record_epoch's metrics.
  // ClaimLostError (nothing written) when another process holds the run. Truncating epochs
  // leaves them (a resumed run keeps its starting point).
  void record_initial_metrics(int64_t run_id, const std::map<std::string, double>& metrics);
  // The run's initial_metrics by name; empty when it has none.
  std::map<std::string, double> initial_metrics(int64_t run_id) const;
  // The loss_scale_events of a run in step order (re-recording or truncating epochs drops
  // theirs).
  std::vector<records::ScaleEvent> scale_events(int64_t run_id) const;
  // The events of the first `max_runs` runs of `sweep` that have any, in the order of
  // runs(sweep), by global step: the report's loss-scale plot in one query, not one per run.
  std::vector<std::pair<int64_t, std::vector<records::ScaleEvent>>> scale_events(
      const std::string& sweep, size_t max_runs) const;

  // Drops epochs > `epoch` of a run (and their metrics) before it is resumed from `epoch`;
  // returns the checkpoint files those rows referenced so the caller can delete them.
  // ClaimLostError when another process holds the run.
  std::vector<records::CheckpointFile> truncate_after(int64_t run_id, int epoch);
  // The file of that epoch was deleted by retention: the epoch row keeps its metrics.
  void forget_checkpoint(int64_t run_id, int epoch);

  // Replaces the diagnosis of (run_id, epoch), its rows and advice, all or nothing. StoreError
  // when the run does not exist.
  void record_diagnosis(const records::Diagnosis& diagnosis);
  // The FP8 rows (table fp8_diagnostics, migration 22) of the run's newest diagnosis that has
  // any (by recorded_at, then the higher epoch), in batch and seq order; unset when none has.
  struct Fp8Diagnosis {
    int epoch = 0;
    std::vector<records::Fp8DiagnosticRow> rows;
  };
  std::optional<Fp8Diagnosis> fp8_diagnosis(int64_t run_id) const;
  // The forward rows of every diagnosis of the runs of `sweep`, worst over the batches per
  // module (min cosine, max of the others), ordered by run id, epoch, seq: the report's
  // per-module error plot. DiagnosticRow::batch holds the number of batches.
  struct ModuleError {
    int64_t run_id = 0;
    int epoch = 0;
    double cosine_min = 0;  // the diagnosis's threshold (records::Diagnosis::cosine_min)
    records::DiagnosticRow worst;
  };
  std::vector<ModuleError> module_errors(const std::string& sweep) const;

  // Merges the databases `inputs` into this one, in one transaction: all or nothing. Every input
  // is checked first (check_merge_input; never this database itself), so a bad one is named
  // before anything is written; inputs are opened read-only.
  //  - Sweeps are matched by name (an input sweep updated later brings its description / YAML);
  //    metric_info rows this database lacks are added.
  //  - Runs are matched by (sweep, config hash). A cell new here is inserted with a new id; its
  //    fork parent, run_params, epochs, metrics and loss-scale events follow the new id, and its
  //    status, claim (holder, heartbeat) and provenance come with the row.
  //  - A cell in both: the copy with more recorded epochs is kept; on a tie a finished copy (done
  //    or diverged) over an unfinished one, else this database's. A kept input copy replaces the
  //    run's row, run_params and epochs under the existing id (forks of it stay attached). Two
  //    copies that differ are reported as a MergeConflict; a copy merged before is unchanged, so
  //    merging an input again changes nothing.
  //  - Checkpoint paths are copied as recorded (the files stay where their shard wrote them;
  //    relative paths are relative to the directory training ran in) and counted, with those
  //    not found from the working directory; a path outside its run's own folders, or not named
  //    as a checkpoint (`layout`: train's rule, given by app), is merged as deleted, unless this
  //    database recorded that same file (path and sha256) for that run and epoch before (a run
  //    copied out with copy_runs, trained further elsewhere and merged back keeps its epochs').
  // Throws StoreError naming the input (not SQLite, corrupt, newer schema, missing, two runs of
  // one name with different configs) or this database (cannot write).
  records::MergeReport merge(const std::vector<std::string>& inputs,
                             const records::CheckpointLayout& layout);

  // Copies runs `runs` of `source`, a database this process trusts (its own results database,
  // of this schema), with their fork ancestors, into this one by merge's rules: sweeps, the runs
  // and their run_params, epochs, metrics, loss-scale events, initial metrics and diagnoses (not
  // prune decisions), checkpoint paths as recorded wherever they point. `config`, when set,
  // rewrites the config_json of the runs of `runs` (not of their ancestors) as they are copied:
  // `tune --slurm` gives a task's run its own checkpoint.dir, which is no part of its identity.
  // One transaction. Throws StoreError naming the file.
  records::MergeReport copy_runs(const std::string& source, const std::vector<int64_t>& runs,
                                 const std::function<std::string(const std::string&)>& config);

  // "ok", or what PRAGMA integrity_check / foreign_key_check found.
  std::string integrity_check() const;
  // Columns of runs that RunSpec::columns may fill (in table order).
  std::vector<std::string> setting_columns() const;

  // Read-only ad-hoc query for tests and tools (the commands use the typed reads below): runs
  // one SELECT (or a read-only PRAGMA) with `params` bound as text to ?1, ?2, ... and returns
  // every row. Values come back as text: integers "3", reals in the shortest spelling that reads
  // back (strtod) as the same double ("0.1", "62.5"), text and blobs as stored; SQL NULL is
  // std::nullopt. A statement that would write (sqlite3_stmt_readonly false) or holds more than
  // one statement is a StoreError naming the database and the SQL.
  struct QueryResult {
    std::vector<std::string> columns;
    std::vector<std::vector<std::optional<std::string>>> rows;
  };
  QueryResult query(const std::string& sql, const std::vector<std::string>& params = {}) const;

  // Evaluation of a saved checkpoint (amptune eval): sets `metrics` of the existing epoch row
  // (run_id, epoch), replacing those names' values and leaving every other metric and the epoch
  // row untouched; one transaction. Throws StoreError when the epoch row does not exist or a
  // name is not an allowed metric name (see record_epoch).
  void record_metrics(int64_t run_id, int epoch, const std::map<std::string, double>& metrics);
  // Epochs of `run_id` that some run forks from (runs.parent_run_id = run_id, parent_epoch):
  // their checkpoints must stay. Ascending, no duplicates.
  std::vector<int> fork_epochs(int64_t run_id) const;

  // --- Typed reads of the query side (src/app: amptune compare / report / status) ---------------
  // Each reads one sweep, by name (an unknown name reads as a sweep without runs). Doubles that
  // are NULL in the database come back as NaN (per-epoch values) or unset (aggregates over
  // epochs that may not exist).

  // Every sweep's name, sorted.
  std::vector<std::string> sweep_names() const;

  // The direction of `metric` from the metric_info table; unset for a name it does not list (the
  // views, and amptune compare, then treat it as higher-is-better).
  std::optional<bool> higher_is_better(const std::string& metric) const;

  // The names metric_values can read for the runs of `sweep`, sorted: the epochs columns the
  // epoch_values view exposes as values (train_loss, lr, train_fps_mean, epoch_seconds) and
  // every metric name recorded for an epoch of one of its runs.
  std::vector<std::string> metric_names(const std::string& sweep) const;

  // One recorded, non-NULL value of a metric (or of an epochs column, as in epoch_values).
  struct MetricValue {
    int64_t run_id = 0;
    int epoch = 0;
    double value = 0;
  };
  // Every non-NULL value of `metric` of the runs of `sweep`, ordered by run id, then epoch.
  // `metric` is a metric name or one of the epochs columns metric_names lists; a name nothing
  // recorded gives no rows. Reads the tables (not the epoch_values view, whose UNION ALL does not
  // use the metrics_by_run_name index).
  // With `with_nulls`, values stored as NULL (NaN: a diverged evaluation) come back too, as NaN.
  std::vector<MetricValue> metric_values(const std::string& sweep, const std::string& metric,
                                         bool with_nulls = false) const;

  // What a run's epochs add up to. Aggregates over no (non-NULL) value are unset.
  struct RunTotals {
    int64_t run_id = 0;
    int epochs = 0;                            // recorded epoch rows
    std::optional<int64_t> last_global_step;   // the largest global_step of its epochs
    std::optional<double> mean_fps;            // mean of the epochs' train_fps_mean, img/s
    std::optional<double> overflow_steps;      // sum of the metric overflow_steps over epochs
    std::optional<double> skipped_steps;       // sum of the metric skipped_steps over epochs
  };
  // One entry per run of `sweep` (runs without epochs included), in the order of runs(sweep).
  std::vector<RunTotals> run_totals(const std::string& sweep) const;

 private:
  Store(const std::string& open_path, const std::string& name);
  struct ReadOnly {};
  Store(const std::string& path, ReadOnly);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::vector<std::pair<std::string, std::string>> setting_columns_;  // name, declared type
};

}  // namespace amptune::store
