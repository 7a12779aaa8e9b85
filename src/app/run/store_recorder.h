// The recorder of the process that owns a run (train/recorder.h): the run's rows in the results
// database, its checkpoint folder (claimed for the database before anything is written there),
// retention, and the claim's heartbeat from a thread of its own; and the training of a claimed
// run through it. No torch here.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "app/prune/prune_rules.h"
#include "core/process.h"
#include "core/settings.h"
#include "store/store.h"
#include "train/recorder.h"
#include "train/trainer.h"

namespace amptune::app {

class StoreRecorder : public train::Recorder {
 public:
  // Claims the checkpoint root of the run's settings (checkpoint.*) for `store`
  // (claim_checkpoint_root), removes temp files of saves a dead process left in the run's
  // folder, and starts the heartbeat (every `heartbeat_seconds`); retention ranks by the model's
  // primary metric (model_info of the settings). Throws CheckpointError when the root belongs to
  // another database.
  StoreRecorder(store::Store& store, const train::RunInput& run, double heartbeat_seconds);
  // After each recorded epoch but the last, the sweep's prune rule decides about the run
  // (decide_after_epoch); a decision to stop is a stop request (kPruned) and is recorded with
  // the run's end (Store::prune_run). Rule none (the default) never stops.
  void set_prune(const PruneSettings& settings) { prune_ = settings; }
  ~StoreRecorder() override;

  std::vector<records::EpochRow> epochs() override;
  std::vector<records::EpochRow> epochs_of(int64_t run_id) override;
  std::optional<train::RunInput> find_run(int64_t run_id) override;  // resolve_run of its row
  void forget_after(int64_t epoch) override;
  std::string checkpoint_dir() const override { return dir_; }
  void note(const std::string& line, bool warning) override;
  void record_initial_metrics(const std::map<std::string, double>& metrics) override;
  void record_work(const records::RunWork& work) override;
  void check_claim() override;
  void record_epoch(records::EpochRecord& record) override;
  void end(train::Ending ending, const std::string& message,
           const std::string& summary_json) override;

 protected:
  std::optional<train::StopRequest> own_stop_request() override;

 private:
  class Heartbeat;
  store::Store& store_;
  const train::RunInput run_;
  const CheckpointSettings checkpoint_;  // checkpoint.*
  std::string dir_;
  std::string primary_metric_;
  bool higher_is_better_ = true;
  std::unique_ptr<Heartbeat> heartbeat_;
  // A forced exit (a second SIGINT / SIGTERM while a scripted forward never returns:
  // core/process.h) puts the run back to pending through a connection of its own, unless end()
  // began.
  std::shared_ptr<std::atomic<bool>> ended_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<ForcedExitHook> release_on_forced_exit_;
  int64_t epochs_ = 0;  // schedule.epochs
  PruneSettings prune_;
  std::optional<records::PruneDecisionRow> pruned_;  // the decision that stopped the run
};

// Trains `run` (already claimed: status running) to the end of its schedule, recording every
// epoch in `store` through a StoreRecorder. Errors inside training are caught and reported as
// kFailed with a message; the run row is updated before returning (a stored configuration that
// does not resolve, or a recorder that cannot start, e.g. a checkpoint root of another database,
// fails the run). With options.cluster, the calling
// process is the leader (rank 0): it tells the other ranks which run to train (they call
// train::follow_run), hands them its restored state, and alone writes the store and the
// checkpoints.
// With `prune`, its rule may stop the run after an epoch (StoreRecorder::set_prune).
train::RunResult train_claimed_run(store::Store& store, const records::RunRow& run,
                                   const train::RunOptions& options,
                                   const PruneSettings& prune = {});

}  // namespace amptune::app
