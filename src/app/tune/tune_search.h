// The search of `amptune tune` (docs/TUNE.md "The search, step by step") over an executor: the
// algorithm decides, the executor acts. The search reads no database and trains nothing itself:
// it asks a TuneExecutor for runs (made, or found again by identity), for training to an epoch,
// for what a run's curve is, for diagnoses, and to record each decision. app/tune/tune_executor.h
// implements it over the results database and the runner; the unit tests implement it over
// scripted curves, so every path of the algorithm runs in milliseconds.
//
// Resuming is replaying: every executor action is idempotent (the same setting is the same run, a
// run trained to an epoch is not trained again, a stored diagnosis is reused, a recorded row is
// kept), so the search run again from the top makes the same decisions and continues where the
// last one stopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/tune/tune_rules.h"
#include "core/config.h"
#include "core/sweep.h"
#include "records/records.h"

namespace amptune::app {

// What the search sees of a run.
struct RunView {
  int64_t id = 0;
  std::string name;
  Config config;  // as resolved when it was made
  RunCurve curve;
  int64_t parent = 0;  // the run it continues; 0: trained from scratch
  int fork_epoch = -1;
};

class TuneExecutor {
 public:
  virtual ~TuneExecutor() = default;

  // --- runs. Each is made pending, or found again by identity (the same setting is the same run).
  // The run of `config` trained from scratch: on the reference's data when `reference` (the
  // reference and its seed repeats), else on the start's.
  virtual int64_t fresh_run(const Config& config, const std::string& label,
                            bool reference = false) = 0;
  // The run of run `from`'s config with `change`: a fork of `from`'s state at `epoch` (an
  // ancestor's checkpoint when `from` forked after it), or trained from scratch when `epoch` is
  // -1, that state is not kept, or the change cannot fork.
  virtual int64_t candidate_run(int64_t from, int epoch, const Overrides& change,
                                const std::string& label) = 0;
  // Whether run `id`'s state at `epoch` is kept (its checkpoint, or its ancestor's).
  virtual bool kept(int64_t id, int epoch) = 0;
  // Trains each run until it has recorded `epoch` or ended; false when a signal stopped it.
  virtual bool train_to(const std::vector<int64_t>& ids, int epoch) = 0;
  virtual RunView view(int64_t id) = 0;
  // The epochs run `id` recorded itself after `after`, up to `upto` (the search's ledger).
  virtual int trained(int64_t id, int after, int upto) = 0;
  // The advice of a diagnosis of run `id` at its state of `epoch` (-1: its initial weights),
  // stored with its evidence, or the stored one. Empty when it cannot be diagnosed.
  virtual std::vector<records::DiagnosisAdvice> diagnose(int64_t id, int epoch) = 0;
  // Stops a candidate at a rung: status pruned with `decision` as its evidence.
  virtual void prune(const records::PruneDecisionRow& decision) = 0;
  // The share of run `id`'s forward multiply-accumulates in fp32 and in FP8 (NaN: not
  // measured), and its mean training images/s (0: none).
  virtual double fp32_share(int64_t id) = 0;
  virtual double fp8_share(int64_t id) = 0;
  virtual double speed(int64_t id) = 0;

  // --- decisions (tune_searches, tune_rounds, tune_candidates); recording a row that is
  // already there keeps it.
  virtual records::TuneSearchRow open_search(const records::TuneSearchRow& row) = 0;
  virtual void record_round(const records::TuneRoundRow& round) = 0;
  virtual void record_candidate(const records::TuneCandidateRow& candidate) = 0;
  virtual void update_candidate(const records::TuneCandidateRow& candidate) = 0;
  virtual void finish_search(const records::TuneSearchRow& search) = 0;
};

// What the search is asked: a sweep's tune: block resolved (app/tune/tune.h plan_tune).
struct SearchSpec {
  TuneBlock block;
  Config base;       // the sweep's base, checkpoints every epoch, all kept (forks need them)
  Config reference;  // base + tune.reference
  Config start;      // base + tune.start
  std::string metric;
  Tolerance tolerance;
  int epochs = 0;  // schedule.epochs of the reference and the start
  int budget = 0;  // tune.budget.epochs resolved
};

struct SearchResult {
  int64_t search_id = 0;
  bool stopped = false;  // a signal: it continues when run again
};

// Runs (or continues) the search of `spec` for the sweep `sweep_id` through `executor`.
SearchResult run_search(TuneExecutor& executor, const SearchSpec& spec, int64_t sweep_id);

}  // namespace amptune::app
