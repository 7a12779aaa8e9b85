// The executor of `amptune tune` over the results database and the runner (app/tune/tune_search.h
// TuneExecutor): runs are rows of the sweep (found again by identity), training is the runner's
// claim-and-train loop (train_schedule, shared with `run`), diagnoses are train::diagnose's,
// decisions are rows of tune_searches / tune_rounds / tune_candidates. No torch in this header.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "app/run/runner.h"
#include "app/tune/tune.h"
#include "app/tune/tune_search.h"
#include "store/store.h"

namespace amptune::app {

class StoreExecutor : public TuneExecutor {
 public:
  // The search of `plan` (app/tune/tune.h) on `store`, its runs trained with `options`.
  StoreExecutor(store::Store& store, const TunePlan& plan, const SweepOptions& options);

  // The sweep's row (made when missing).
  int64_t sweep_id() const { return sweep_id_; }
  // What this process trained.
  const Tally& tally() const { return tally_; }
  int64_t fresh_run(const Config& config, const std::string& label, bool reference) override;
  int64_t candidate_run(int64_t from, int epoch, const Overrides& change,
                        const std::string& label) override;
  bool kept(int64_t id, int epoch) override;
  bool train_to(const std::vector<int64_t>& ids, int epoch) override;
  RunView view(int64_t id) override;
  int trained(int64_t id, int after, int upto) override;
  std::vector<records::DiagnosisAdvice> diagnose(int64_t id, int epoch) override;
  void prune(const records::PruneDecisionRow& decision) override;
  double fp32_share(int64_t id) override;
  double fp8_share(int64_t id) override;
  double speed(int64_t id) override;

  records::TuneSearchRow open_search(const records::TuneSearchRow& row) override;
  void record_round(const records::TuneRoundRow& round) override;
  void record_candidate(const records::TuneCandidateRow& candidate) override;
  void update_candidate(const records::TuneCandidateRow& candidate) override;
  void finish_search(const records::TuneSearchRow& search) override;

 private:
  // Where run `run`'s state at `epoch` is kept: the run itself, or the ancestor whose epoch it
  // is, with the overrides that lead from that run's config to `run`'s. No owner: not kept.
  struct ForkPoint {
    std::optional<records::RunRow> owner;
    Overrides overrides;
  };
  ForkPoint fork_point(const records::RunRow& run, int epoch);
  // The sweep's values of the metric by run and epoch, read again after training.
  const std::map<int64_t, std::map<int, double>>& values();

 protected:  // for executors that train elsewhere (app/tune/tune_slurm.h)
  store::Store& store_;
  const TunePlan& plan_;
  const SweepOptions& options_;
  Tally tally_;
  bool values_stale_ = true;  // runs trained since the values were read

 private:
  int64_t sweep_id_ = 0;
  std::map<int64_t, std::map<int, double>> values_;  // as last read
  std::pair<double, double> shares(int64_t id);  // fp32 and FP8 shares of the forward work
  std::map<int64_t, std::pair<double, double>> shares_;  // by run id
};

}  // namespace amptune::app
