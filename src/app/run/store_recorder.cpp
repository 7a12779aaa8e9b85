// app/run/store_recorder.h: the owner's recorder and the training of a claimed run through it.
#include "app/run/store_recorder.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "app/artifacts/checkpoint_folders.h"
#include "app/prune/prune_sweep.h"
#include "app/run/run_input.h"
#include "core/config.h"
#include "core/log.h"
#include "train/model_info.h"
#include "train/plan.h"
#include "train/retention.h"

namespace amptune::app {
using train::Ending;
using train::Outcome;
using train::StopRequest;
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// Keeps a claimed run's heartbeat fresh from its own thread and database connection, whatever
// the training thread is doing (a long evaluation, a checkpoint write, data loading), and
// notices when another process has taken the run over.
class StoreRecorder::Heartbeat {
 public:
  Heartbeat(const std::string& db, int64_t run_id, double period_seconds)
      : store_(db),
        run_id_(run_id),
        period_(std::max(0.05, period_seconds)),
        thread_([this] { loop(); }) {}
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // The ClaimLostError message the thread met ("" while the run is ours).
  std::string lost() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
      lock.unlock();
      std::string lost;
      try {
        store_.heartbeat(run_id_);
      } catch (const records::ClaimLostError& e) {
        lost = e.what();
      } catch (const std::exception& e) {  // a busy or full disk: the next beat tries again
        log::warn(std::string("heartbeat: ") + e.what());
      }
      lock.lock();
      if (!lost.empty()) {
        lost_ = lost;
        return;
      }
    }
  }

  store::Store store_;  // its own connection: a Store is used from one thread
  const int64_t run_id_;
  const std::chrono::duration<double> period_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string lost_;
  std::thread thread_;  // last: starts once the members above exist
};

StoreRecorder::StoreRecorder(store::Store& store, const train::RunInput& run,
                             double heartbeat_seconds)
    : store_(store), run_(run), checkpoint_(run.settings().checkpoint) {
  const Settings& settings = run.settings();
  heartbeat_ = std::make_unique<Heartbeat>(store.path(), run.id, heartbeat_seconds);
  release_on_forced_exit_ =
      std::make_unique<ForcedExitHook>([path = store.path(), id = run.id, ended = ended_] {
        if (*ended) return;
        store::Store(path).release_run(id,
                                       "interrupted: the process was stopped by a second "
                                       "signal during a step");
      });
  claim_checkpoint_root(checkpoint_, store);  // before anything is written or deleted there
  dir_ = train::checkpoint_dir(checkpoint_, store.path(), run.id);
  // Saves of this run that a killed process left half-written (it holds the run now).
  for (const auto& file : train::remove_dead_temp_files(dir_)) {
    log::info("run " + run.name + ": removed " + file + " (a save interrupted by a crash)");
  }
  epochs_ = settings.schedule.epochs;
  const train::ModelInfo info = train::model_info(settings);
  primary_metric_ = info.primary_metric;
  higher_is_better_ = info.higher_is_better;
}

StoreRecorder::~StoreRecorder() = default;

std::vector<records::EpochRow> StoreRecorder::epochs() { return store_.epochs(run_.id); }

std::vector<records::EpochRow> StoreRecorder::epochs_of(int64_t run_id) {
  return store_.epochs(run_id);
}

std::optional<train::RunInput> StoreRecorder::find_run(int64_t run_id) {
  const std::optional<records::RunRow> row = store_.find_run(run_id);
  if (!row) return std::nullopt;
  return resolve_run(*row);
}

void StoreRecorder::forget_after(int64_t epoch) {
  // Only files in the run's own folder are deleted (remove_own_checkpoint).
  for (const auto& f : store_.truncate_after(run_.id, epoch)) {
    train::remove_own_checkpoint(f.path, dir_);
  }
}

void StoreRecorder::note(const std::string& line, bool warning) {
  if (warning) {
    log::warn(line);
  } else {
    log::info(line);
  }
}

void StoreRecorder::record_initial_metrics(const std::map<std::string, double>& metrics) {
  store_.record_initial_metrics(run_.id, metrics);
}

void StoreRecorder::record_work(const records::RunWork& work) {
  store_.record_run_work(run_.id, work);
}

void StoreRecorder::check_claim() {
  if (const std::string lost = heartbeat_->lost(); !lost.empty()) {
    throw records::ClaimLostError(lost);
  }
  store_.heartbeat(run_.id);  // still ours? (the new holder writes the same file names)
}

std::optional<StopRequest> StoreRecorder::own_stop_request() {
  if (std::string lost = heartbeat_->lost(); !lost.empty()) {
    return StopRequest{Outcome::kLost, std::move(lost)};
  }
  return std::nullopt;
}

void StoreRecorder::record_epoch(records::EpochRecord& record) {
  const auto db_start = std::chrono::steady_clock::now();
  record.run_id = run_.id;
  store_.record_epoch(record);  // advances the heartbeat in the same transaction
  apply_retention(store_, run_.id, checkpoint_, primary_metric_, higher_is_better_);
  if (record.epoch + 1 < epochs_ && !pruned_) {  // a run that has finished is not pruned
    pruned_ = decide_after_epoch(store_, run_, record.epoch, prune_);
    if (pruned_) request_stop(StopRequest{Outcome::kPruned, pruned_->reason});
  }
  store_.set_epoch_db_seconds(run_.id, record.epoch, seconds_since(db_start));
}

void StoreRecorder::end(Ending ending, const std::string& message,
                        const std::string& summary_json) {
  *ended_ = true;  // the run's end is recorded here, not by a forced exit
  switch (ending) {
    case Ending::kDone:  // a store error here fails the run (the loop's caller catches it)
      store_.finish_run(run_.id, records::RunStatus::kDone, "", summary_json);
      return;
    case Ending::kDiverged:
      store_.finish_run(run_.id, records::RunStatus::kDiverged, message, "");
      log::warn("run " + run_.name + " diverged: " + message);
      return;
    case Ending::kUntouched:
      return;
    case Ending::kPruned:
      if (!pruned_) break;  // cannot happen: only this recorder's decision prunes
      store_.prune_run(*pruned_);
      log::info("run " + run_.name + " pruned after epoch " + std::to_string(pruned_->epoch) +
                ": " + pruned_->reason);
      return;
    case Ending::kFailed:
    case Ending::kPending:
      break;
  }
  // The run's outcome is decided: a store error is logged, not thrown.
  try {
    if (ending == Ending::kFailed || ending == Ending::kPruned) {
      store_.finish_run(run_.id, records::RunStatus::kFailed, message, "");
    } else {
      store_.release_run(run_.id, message);
    }
  } catch (const std::exception& e) {
    log::warn("could not record the end of run " + run_.name + ": " + e.what());
  }
}

train::RunResult train_claimed_run(store::Store& store, const records::RunRow& run,
                                   const train::RunOptions& options, const PruneSettings& prune) {
  std::optional<train::RunInput> input;  // the run resolved once, for the recorder and training
  std::unique_ptr<StoreRecorder> recorder;
  try {
    input.emplace(resolve_run(run));
    recorder = std::make_unique<StoreRecorder>(store, *input, options.heartbeat_seconds);
    recorder->set_prune(prune);
  } catch (const std::exception& e) {
    try {
      store.finish_run(run.id, records::RunStatus::kFailed, e.what(), "");
    } catch (const std::exception& e2) {
      log::warn(std::string("could not mark run failed: ") + e2.what());
    }
    return train::RunResult{Outcome::kFailed, e.what(), ""};
  }
  if (options.cluster) train::lead_run(*options.cluster, *input);  // the others follow it
  return train::train_run(*recorder, *input, options);
}

}  // namespace amptune::app
