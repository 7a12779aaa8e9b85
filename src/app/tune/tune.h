// `amptune tune`: the search for the lowest-precision setting that keeps a metric within a
// tolerance of an fp32 reference (a sweep's tune: block; docs/TUNE.md has every step):
//
//   app::TunePlan plan = app::plan_tune("experiments/tune_planted.yaml", sets);  // writes nothing
//   store::Store store(db);
//   app::TuneOutcome out = app::run_tune(store, plan, options);
//
// The search (app/tune/tune_search.h) trains the reference and the start (reused by identity when
// trained), diagnoses the start where it leaves the tolerance band, turns the advice and the move
// order into candidates (forks of the start from that epoch), runs successive halving over them
// (losers stop as pruned), tries the union of the moves that helped, and carries the candidate
// that got furthest on until one ends within tolerance; a solution's items are then bisected and
// the answer confirmed from scratch. It runs here over app/tune/tune_executor.h: every step is a
// function of the database, so several processes (--workers) run the same search and share its
// training through the store's claims, and a search stopped at any point continues from the
// database with the same answer. No torch.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "app/run/runner.h"
#include "app/tune/tune_search.h"
#include "core/sweep.h"
#include "store/store.h"

namespace amptune::app {

struct TuneSlurmOptions;  // app/tune/tune_slurm.h

// A sweep's tune: block resolved and checked: the search's spec (app/tune/tune_search.h), the sweep
// and the fingerprints of the data the runs train on.
struct TunePlan : SearchSpec {
  Sweep sweep;  // its tune block is set (SearchSpec::block is a copy)
  std::string reference_fingerprint, start_fingerprint;  // of their data (planned with data)
};

// Reads the sweep file at `path` (with --set `sets`) and checks its tune: block before anything
// is written: the reference's and the start's configs (train::validate_config), that they
// differ, train the same number of epochs (at least 2) and record the metric (listing those the
// model records), that tune.fork_from is an epoch of them, that the budget covers the reference
// (with its repeats) and the start, and with `data` that their data open. Throws ConfigError naming file:line and
// the key, UsageError when the sweep has no tune: block.
TunePlan plan_tune(const std::string& path, const std::vector<std::string>& sets, bool data = true);

// A search as the database holds it.
struct TuneOutcome {
  records::TuneSearchRow search;
  std::vector<records::TuneRoundRow> rounds;
  std::vector<records::TuneCandidateRow> candidates;
  std::map<int64_t, records::RunRow> runs;  // the reference, the start and every candidate's run
  std::vector<records::TuneJobRow> jobs;    // its Slurm tasks (--slurm), in flight or ended
  Tally tally;                            // what this process trained
  bool stopped = false;                   // a signal stopped it: it continues when run again
};

// Runs (or continues) the search of `plan` on `store` and returns it as stored. Training
// failures are the candidates' outcomes; a failed or diverged reference ends the search
// (exhausted, with the reason in its note). With `slurm`, its runs train as Slurm array jobs
// (app/tune/tune_slurm.h), else here.
TuneOutcome run_tune(store::Store& store, const TunePlan& plan, const SweepOptions& options,
                     const TuneSlurmOptions* slurm = nullptr);

// The newest search of `sweep` in `store`; unset when it has none.
std::optional<TuneOutcome> tune_status(const store::Store& store, const std::string& sweep);
// The same from the existing database at `db` (open_existing: exit 5 when there is none).
std::optional<TuneOutcome> tune_status(const std::string& db, const std::string& sweep);

// `amptune tune` on the database at `db` (made when missing). One process (`workers` 1): the
// search itself (run_tune, through Slurm with `slurm`), exit code 130 when a signal stopped it,
// else its tally's. With `workers` > 1: the sweep is registered and `workers` processes of
// `worker_args` share the search (run_workers); their exit code, and the search as they stored
// it.
struct TuneCommand {
  int exit_code = 0;
  std::optional<TuneOutcome> outcome;  // unset only when workers stored no search
};
TuneCommand tune_database(const std::string& db, const TunePlan& plan, const SweepOptions& options,
                          int workers, const std::vector<std::string>& worker_args,
                          const TuneSlurmOptions* slurm = nullptr);

}  // namespace amptune::app
