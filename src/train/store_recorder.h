// The recorder of the process that owns a run (train/recorder.h): the run's rows in the results
// database, its checkpoint folder (claimed for the database before anything is written there),
// retention, and the claim's heartbeat from a thread of its own. No torch here.
#pragma once

#include <memory>
#include <string>

#include "core/settings.h"
#include "store/store.h"
#include "train/recorder.h"

namespace amptune::train {

class StoreRecorder : public Recorder {
 public:
  // Claims the checkpoint root of the run's `settings` (checkpoint.*) for `store`
  // (claim_checkpoint_root), removes temp files of saves a dead process left in the run's
  // folder, and starts the heartbeat (every `heartbeat_seconds`); retention ranks by the model's
  // primary metric (model_info of `settings`). Throws CheckpointError when the root belongs to
  // another database.
  StoreRecorder(store::Store& store, const store::RunRow& run, const Settings& settings,
                double heartbeat_seconds);
  ~StoreRecorder() override;

  std::vector<store::EpochRow> epochs() override;
  std::vector<store::EpochRow> epochs_of(int64_t run_id) override;
  std::optional<store::RunRow> find_run(int64_t run_id) override;
  void forget_after(int64_t epoch) override;
  std::string checkpoint_dir() const override { return dir_; }
  void note(const std::string& line, bool warning) override;
  void record_initial_metrics(const std::map<std::string, double>& metrics) override;
  void check_claim() override;
  void record_epoch(store::EpochRecord& record) override;
  void end(Ending ending, const std::string& message, const std::string& summary_json) override;

 protected:
  std::optional<StopRequest> own_stop_request() override;

 private:
  class Heartbeat;
  store::Store& store_;
  const store::RunRow run_;
  const CheckpointSettings checkpoint_;  // checkpoint.*
  std::string dir_;
  std::string primary_metric_;
  bool higher_is_better_ = true;
  std::unique_ptr<Heartbeat> heartbeat_;
};

}  // namespace amptune::train
