// The one interface the training loop (train/trainer.h) records a run through and is stopped
// through. No torch here.
//
//   StoreRecorder (app/run/store_recorder.h)    the process that owns the run: writes the database,
//                                            saves checkpoints, keeps the claim's heartbeat
//   FollowerRecorder                         another rank of a data-parallel job: records nothing
//   MemoryRecorder                           tests: epoch rows in memory, checkpoints in a folder
//
// The loop asks the recorder what the run has (epochs, a fork's parent), tells it what happened
// (initial metrics, epochs, the end) and polls it for a stop between steps. Stopping a run from
// outside the loop (a signal, a pruning decision, a takeover seen by the heartbeat) is one call,
// request_stop, from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "records/records.h"
#include "train/run_input.h"

namespace amptune::train {

// kLost: another process took the run over while this one trained it (this one was presumed
// dead); nothing more was written. kRankLost: a process of a data-parallel job stopped
// answering; the run is left resumable (pending) and the job stops. kPruned: the recorder's
// prune rule stopped the run after an epoch (status pruned, resumable).
enum class Outcome { kDone, kDiverged, kFailed, kInterrupted, kLost, kRankLost, kPruned };

// How a run's row ends up when the loop returns.
enum class Ending {
  kDone,      // status done, with the summary
  kDiverged,  // status diverged, with the message
  kFailed,    // status failed, with the message
  kPending,   // back to pending with the message: the next command continues it
  kPruned,    // status pruned: a prune rule stopped it (the recorder holds the decision)
  kUntouched  // written by another process now: nothing more is written (a takeover)
};

// A stop before the schedule ends. kInterrupted puts the run back to pending (a signal, a
// stop after an epoch asked for); kLost writes nothing more (a takeover); kPruned ends it as
// pruned (a prune rule's decision).
struct StopRequest {
  Outcome outcome = Outcome::kInterrupted;
  std::string message;  // "" : the loop says where it stopped
};

class Recorder {
 public:
  virtual ~Recorder() = default;

  // --- What the run has (restore) ---
  // The run's recorded epochs, oldest first; those of run `run_id` (a fork's parent).
  virtual std::vector<records::EpochRow> epochs() = 0;
  virtual std::vector<records::EpochRow> epochs_of(int64_t run_id) = 0;
  virtual std::optional<RunInput> find_run(int64_t run_id) = 0;
  // Forgets the epochs after `epoch` (-1: every epoch) and deletes their checkpoint files that
  // lie in the run's own folder.
  virtual void forget_after(int64_t epoch) = 0;
  // Where the run's checkpoints (and profile traces) go: its own folder; "" when this process
  // saves none.
  virtual std::string checkpoint_dir() const = 0;
  // A log line (a warning when `warning`) that only the recording process writes (the other
  // ranks would repeat it).
  virtual void note(const std::string& line, bool warning) = 0;

  // --- While training ---
  virtual void record_initial_metrics(const std::map<std::string, double>& metrics) = 0;
  // The run's training FLOPs per sample and its devices' peak (docs/PERFORMANCE.md "MFU"), once
  // per start, before the first epoch.
  virtual void record_work(const records::RunWork& work) = 0;
  // Throws records::ClaimLostError when another process holds the run now; called before a
  // checkpoint is written (the new holder writes the same file names).
  virtual void check_claim() = 0;
  // One epoch: its row, metrics, scale events, time breakdown and checkpoint file; then the
  // retention rule.
  virtual void record_epoch(records::EpochRecord& record) = 0;

  // --- Stopping ---
  // Asks the loop to stop at its next step; the first request wins. Any thread.
  void request_stop(const StopRequest& request);
  // The pending request: one made with request_stop, else SIGINT / SIGTERM (core/process.h),
  // else what the implementation knows (StoreRecorder: a takeover seen by the heartbeat).
  std::optional<StopRequest> stop_request();

  // --- The end ---
  virtual void end(Ending ending, const std::string& message, const std::string& summary_json) = 0;

 protected:
  virtual std::optional<StopRequest> own_stop_request() { return std::nullopt; }

 private:
  std::mutex mutex_;
  std::optional<StopRequest> requested_;
};

// A follower rank of a data-parallel job: the leader records; this one has nothing to restore
// (the leader sends its state) and writes nothing. A failure is logged with the rank.
class FollowerRecorder : public Recorder {
 public:
  FollowerRecorder(std::string run_name, int rank) : run_name_(std::move(run_name)), rank_(rank) {}
  std::vector<records::EpochRow> epochs() override { return {}; }
  std::vector<records::EpochRow> epochs_of(int64_t) override { return {}; }
  std::optional<RunInput> find_run(int64_t) override { return std::nullopt; }
  void forget_after(int64_t) override {}
  std::string checkpoint_dir() const override { return ""; }
  void note(const std::string&, bool) override {}
  void record_initial_metrics(const std::map<std::string, double>&) override {}
  void record_work(const records::RunWork&) override {}
  void check_claim() override {}
  void record_epoch(records::EpochRecord&) override {}
  void end(Ending ending, const std::string& message, const std::string&) override;

 private:
  std::string run_name_;
  int rank_;
};

// Everything in memory (tests of the loop without a database): the epochs recorded, as a
// store would return them, checkpoints saved in `checkpoint_dir` (none when empty), the
// ending. A resume continues from the epochs this object holds.
class MemoryRecorder : public Recorder {
 public:
  explicit MemoryRecorder(std::string checkpoint_dir = "") : dir_(std::move(checkpoint_dir)) {}
  std::vector<records::EpochRow> epochs() override { return rows_; }
  std::vector<records::EpochRow> epochs_of(int64_t run_id) override;
  std::optional<RunInput> find_run(int64_t run_id) override;
  void forget_after(int64_t epoch) override;
  std::string checkpoint_dir() const override { return dir_; }
  void note(const std::string& line, bool) override { notes.push_back(line); }
  void record_initial_metrics(const std::map<std::string, double>& metrics) override {
    initial_metrics = metrics;
  }
  void record_work(const records::RunWork& recorded) override { work = recorded; }
  void check_claim() override {}
  void record_epoch(records::EpochRecord& record) override;
  void end(Ending ending, const std::string& message, const std::string& summary_json) override {
    ended = ending;
    end_message = message;
    summary = summary_json;
  }

  // Other runs this recorder knows (a fork's parent), with their epochs.
  std::map<int64_t, std::pair<RunInput, std::vector<records::EpochRow>>> others;
  std::map<std::string, double> initial_metrics;
  std::optional<records::RunWork> work;
  std::vector<std::string> notes;
  std::optional<Ending> ended;
  std::string end_message, summary;

 private:
  std::string dir_;
  std::vector<records::EpochRow> rows_;
};

}  // namespace amptune::train
