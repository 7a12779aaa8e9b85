// The results database: one SQLite file holding sweeps, runs, epochs, metrics, checkpoints.
// Schema and views: schemas/store.sql (compiled in). No torch here.
//
// Concurrency: WAL, busy timeout, short transactions. Each Store object owns one connection and
// is used from one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace amptune::store {

enum class RunStatus { kPending, kRunning, kDone, kFailed, kDiverged };
std::string to_string(RunStatus status);
RunStatus parse_status(const std::string& text);  // throws StoreError on an unknown word

// What a cell is, as the sweep expansion produced it.
struct RunSpec {
  std::string sweep_name;
  int cell_index = 0;
  std::string label;        // Cell::label()
  std::string config_json;  // canonical nested JSON (Config::canonical_json)
  std::string config_hash;  // sha256 hex
  std::string axes_json;    // {"optim.lr": 0.1}
  // Readable columns copied from the config (runs.model, runs.opt_level, ...): column -> value.
  // The values are JSON scalars/arrays as text (e.g. "0.1", "\"resnet18\"", "[17]").
  std::map<std::string, std::string> columns;
};

struct Provenance {
  std::string amptune_version;
  std::string git_commit;
  bool git_dirty = false;
  std::string torch_version;
  std::string host;
  int threads = 1;
  std::string device;
  std::string command_line;
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
  std::string axes_json;
  int epochs_done = 0;         // number of recorded epochs (max epoch + 1), 0 when none
  std::string message;         // failure / divergence reason
  std::string summary_json;    // the final JSON line
  std::string started_at, finished_at, heartbeat_at;  // ISO-8601 UTC, "" when unset
};

struct CheckpointFile {
  std::string path;
  int64_t bytes = 0;
  std::string sha256;
};

// One finished epoch, written in one transaction (epoch row, metrics, checkpoint).
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
};

class Store {
 public:
  // Opens (creating if needed) and migrates the database. Throws StoreError naming the file
  // when it is not an SQLite database, cannot be created, or has a newer schema version.
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  int schema_version() const;

  // Creates the sweep or updates its description/yaml; returns its id.
  int64_t ensure_sweep(const std::string& name, const std::string& description,
                       const std::string& yaml_text, const std::string& source_path);

  // The run of this sweep with spec.config_hash, created as pending when absent.
  RunRow ensure_run(int64_t sweep_id, const RunSpec& spec);

  std::optional<RunRow> find_run(int64_t id) const;
  // By id ("12") or name ("quickstart/0-1a2b3c4d").
  std::optional<RunRow> find_run(const std::string& id_or_name) const;
  std::vector<RunRow> runs(const std::optional<std::string>& sweep_name = std::nullopt) const;

  // status -> running, started_at set when unset, provenance stored, heartbeat now.
  void mark_running(int64_t run_id, const Provenance& provenance);
  void heartbeat(int64_t run_id);
  // status -> done / failed / diverged with a message and the final summary JSON.
  void finish_run(int64_t run_id, RunStatus status, const std::string& message,
                  const std::string& summary_json);

  void record_epoch(const EpochRecord& record);
  std::vector<EpochRow> epochs(int64_t run_id) const;

  // Drops epochs > `epoch` of a run (and their metrics) before it is resumed from `epoch`;
  // returns the checkpoint files those rows referenced so the caller can delete them.
  std::vector<CheckpointFile> truncate_after(int64_t run_id, int epoch);
  // The file of that epoch was deleted by retention: the epoch row keeps its metrics.
  void forget_checkpoint(int64_t run_id, int epoch);

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

}  // namespace amptune::store
