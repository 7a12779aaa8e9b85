// app/tune/tune.h: amptune tune on the results database.
#include "app/tune/tune.h"

#include <memory>

#include "app/tune/tune_executor.h"
#include "app/tune/tune_slurm.h"
#include "app/views/inspect.h"
#include "core/error.h"
#include "core/settings.h"
#include "train/model_info.h"
#include "train/plan.h"

namespace amptune::app {
namespace {

// A search and what it refers to, as stored.
TuneOutcome load_outcome(const store::Store& store, const records::TuneSearchRow& search) {
  TuneOutcome out;
  out.search = search;
  out.rounds = store.tune_rounds(search.id);
  out.candidates = store.tune_candidates(search.id);
  for (const int64_t id : {search.reference_run_id, search.start_run_id}) {
    if (auto run = store.find_run(id)) out.runs[id] = *run;
  }
  for (const auto& c : out.candidates) {
    if (auto run = store.find_run(c.run_id)) out.runs[c.run_id] = *run;
  }
  out.jobs = store.tune_jobs(search.id);
  for (const auto& j : out.jobs) {
    if (auto run = store.find_run(j.run_id)) out.runs[j.run_id] = *run;
  }
  return out;
}

// tune.metric and its direction, from the model's definition (the start's: the same model).
void resolve_metric(TunePlan& plan, const Settings& start) {
  const TuneBlock& block = plan.block;
  const std::string metric =
      block.metric.empty() ? train::model_info(start).primary_metric : block.metric;
  std::string recorded;
  bool found = false;
  for (const train::MetricDef& def : train::recorded_metrics(start)) {
    if (def.name == metric) {
      plan.metric = metric;
      plan.tolerance.higher_is_better = def.higher_is_better;
      found = true;
    }
    recorded += (recorded.empty() ? "" : ", ") + def.name;
  }
  if (!found) {
    throw ConfigError(block.metric_loc.prefix() + "tune.metric " + metric + " is not a metric " +
                      start.model.name + " records; it records " + recorded);
  }
}

// tune.budget.epochs resolved; it must cover the reference (with its repeats) and the start.
void resolve_budget(TunePlan& plan) {
  const TuneBlock& block = plan.block;
  plan.budget =
      static_cast<int>(block.budget_epochs > 0 ? block.budget_epochs : int64_t{8} * plan.epochs);
  const int first = static_cast<int>(1 + block.reference_repeats) * plan.epochs;
  if (plan.budget < first + 1) {
    throw ConfigError(block.budget_loc.prefix() + "tune.budget.epochs " +
                      std::to_string(plan.budget) + " cannot train the reference" +
                      (block.reference_repeats > 1
                           ? " " + std::to_string(block.reference_repeats) + " times"
                           : std::string()) +
                      " and the start (" + std::to_string(first) + " epochs) and one candidate " +
                      "epoch; give at least " + std::to_string(first + 1));
  }
}

}  // namespace

TunePlan plan_tune(const std::string& path, const std::vector<std::string>& sets, bool data) {
  TunePlan plan;
  plan.sweep = load_sweep(path, sets);
  if (!plan.sweep.tune) {
    throw UsageError(path +
                     " has no tune: block; add one (docs/TUNE.md) or train it with "
                     "amptune run");
  }
  plan.block = *plan.sweep.tune;
  const TuneBlock& block = plan.block;
  plan.base = plan.sweep.base;
  // Every epoch's checkpoint is kept: candidates fork from any of them, and stop at rungs.
  plan.base.set("checkpoint.every", 1);
  plan.base.set("checkpoint.keep_last", 0);
  auto checked = [&](const Overrides& overrides, const std::string& which) {
    Config config = with(plan.base, overrides);
    try {
      train::validate_config(config);
    } catch (const ConfigError& e) {
      throw ConfigError(block.loc.prefix() + "tune." + which + ": " + e.what());
    }
    return config;
  };
  plan.reference = checked(block.reference, "reference");
  plan.start = checked(block.start, "start");
  if (plan.reference.hash() == plan.start.hash()) {
    throw ConfigError(block.start_loc.prefix() +
                      "tune.start is the reference's setting: there is nothing to search; "
                      "give the start the low-precision keys, e.g. start: {amp.opt_level: O2}");
  }
  const Settings reference = Settings::from(plan.reference);
  const Settings start = Settings::from(plan.start);
  plan.epochs = static_cast<int>(start.schedule.epochs);
  if (reference.schedule.epochs != start.schedule.epochs || plan.epochs < 2) {
    throw ConfigError(block.start_loc.prefix() +
                      "the reference and the start must train the same "
                      "number of epochs, at least 2 (they train " +
                      std::to_string(reference.schedule.epochs) + " and " +
                      std::to_string(start.schedule.epochs) + "): set schedule.epochs in base");
  }
  if (block.fork_from && *block.fork_from >= plan.epochs - 1) {
    throw ConfigError(block.loc.prefix() + "tune.fork_from " + std::to_string(*block.fork_from) +
                      " leaves no epoch to train after it (epochs 0.." +
                      std::to_string(plan.epochs - 1) + "); use auto or an earlier epoch");
  }
  resolve_metric(plan, start);
  plan.tolerance.abs = block.tolerance_abs;
  plan.tolerance.rel = block.tolerance_rel;
  resolve_budget(plan);
  if (data) {
    train::check_data(reference);
    train::check_data(start);
    plan.reference_fingerprint = train::data_fingerprint(reference);
    plan.start_fingerprint = train::data_fingerprint(start);
  }
  return plan;
}

TuneOutcome run_tune(store::Store& store, const TunePlan& plan, const SweepOptions& options,
                     const TuneSlurmOptions* slurm) {
  const std::unique_ptr<StoreExecutor> executor =
      slurm ? std::make_unique<SlurmTuneExecutor>(store, plan, options, *slurm)
            : std::make_unique<StoreExecutor>(store, plan, options);
  const SearchResult result = run_search(*executor, plan, executor->sweep_id());
  TuneOutcome out;
  for (const auto& s : store.tune_searches(plan.sweep.name)) {
    if (s.id == result.search_id) out = load_outcome(store, s);
  }
  out.tally = executor->tally();
  out.stopped = result.stopped;
  return out;
}

std::optional<TuneOutcome> tune_status(const store::Store& store, const std::string& sweep) {
  const auto searches = store.tune_searches(sweep);
  if (searches.empty()) return std::nullopt;
  return load_outcome(store, searches.back());
}

std::optional<TuneOutcome> tune_status(const std::string& db, const std::string& sweep) {
  return tune_status(open_existing(db), sweep);
}

TuneCommand tune_database(const std::string& db, const TunePlan& plan, const SweepOptions& options,
                          int workers, const std::vector<std::string>& worker_args,
                          const TuneSlurmOptions* slurm) {
  store::Store store(db);
  TuneCommand command;
  if (workers > 1) {
    store.ensure_sweep(plan.sweep.name, plan.sweep.description, plan.sweep.yaml_text,
                       plan.sweep.source_path);
    command.exit_code = run_workers(worker_args, workers, db, plan.sweep.name);
    command.outcome = tune_status(store, plan.sweep.name);
    return command;
  }
  command.outcome = run_tune(store, plan, options, slurm);
  command.exit_code = command.outcome->stopped ? static_cast<int>(ExitCode::kInterrupted)
                                               : command.outcome->tally.exit_code();
  return command;
}

}  // namespace amptune::app
