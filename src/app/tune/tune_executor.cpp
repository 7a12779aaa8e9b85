// app/tune/tune_executor.h: the search's actions on the results database and the runner.
#include "app/tune/tune_executor.h"

#include "app/run/run_input.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "train/diagnose.h"
#include "train/model_info.h"
#include "train/plan.h"

namespace amptune::app {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The per-epoch metric that says an epoch ended inside a streak of non-finite training losses
// (docs/AMP.md "Divergence").
const char* const kStreakMetric = "nonfinite_streak";

// The keys of `config` that differ from `base`, as an ordered JSON object (a run's axes).
nlohmann::ordered_json changed_keys(const Config& config, const Config& base) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const KeySpec& spec : base.schema().keys()) {
    if (config.at(spec.key) != base.at(spec.key)) out[spec.key] = config.at(spec.key);
  }
  return out;
}

}  // namespace

StoreExecutor::StoreExecutor(store::Store& store, const TunePlan& plan, const SweepOptions& options)
    : store_(store), plan_(plan), options_(options) {
  const Sweep& sweep = plan.sweep;
  sweep_id_ = store_.ensure_sweep(sweep.name, sweep.description, sweep.yaml_text, sweep.source_path);
}

int64_t StoreExecutor::fresh_run(const Config& config, const std::string& label, bool reference) {
  Cell cell;
  cell.index = reference ? 0 : 1;
  cell.axes = changed_keys(config, plan_.base);
  cell.hash = config.hash();
  cell.base = std::make_shared<const Config>(plan_.base);
  records::RunSpec spec = cell_spec(plan_.sweep, cell, config,
                                  reference ? plan_.reference_fingerprint : plan_.start_fingerprint);
  spec.label = label;
  return store_.ensure_run(sweep_id_, spec).id;
}

StoreExecutor::ForkPoint StoreExecutor::fork_point(const records::RunRow& run, int epoch) {
  ForkPoint at;
  if (epoch < 0) return at;
  records::RunRow owner = run;
  std::vector<nlohmann::json> steps;  // overrides from the owner down to `run`, innermost first
  std::set<int64_t> seen{owner.id};
  while (owner.fork && epoch <= owner.fork->parent_epoch) {
    // (The store checked overrides_json is an object when it is not empty.)
    const std::string& overrides = owner.fork->overrides_json;
    steps.push_back(overrides.empty() ? nlohmann::json::object()
                                      : nlohmann::json::parse(overrides));
    std::optional<records::RunRow> parent = store_.find_run(owner.fork->parent_run_id);
    if (!parent || !seen.insert(parent->id).second) {
      throw StoreError(store_.path() + ": run " + owner.name + "'s fork parent " +
                       std::to_string(owner.fork->parent_run_id) +
                       (parent ? " leads back to it" : " is not in the database"));
    }
    owner = *parent;
  }
  bool kept = false;
  for (const records::EpochRow& row : store_.epochs(owner.id)) {
    kept = kept || (row.epoch == epoch && row.checkpoint);
  }
  if (!kept) return at;
  nlohmann::json merged = nlohmann::json::object();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    for (const auto& [key, value] : it->items()) merged[key] = value;
  }
  for (const auto& [key, value] : merged.items()) at.overrides.emplace_back(key, value);
  at.owner = owner;
  return at;
}

int64_t StoreExecutor::candidate_run(int64_t from, int epoch, const Overrides& change,
                                     const std::string& label) {
  const records::RunRow run = *store_.find_run(from);
  const ForkPoint at = fork_point(run, epoch);
  if (at.owner && epoch < plan_.epochs - 1) {
    Overrides overrides = at.overrides;
    for (const auto& [key, value] : change) {
      auto same = [&key = key](const auto& kv) { return kv.first == key; };
      overrides.erase(std::remove_if(overrides.begin(), overrides.end(), same), overrides.end());
      overrides.emplace_back(key, value);
    }
    try {
      return store_
          .ensure_run(sweep_id_, train::plan_fork(resolve_run(*at.owner), epoch, overrides, false,
                                                  label, false))
          .id;
    } catch (const ConfigError& e) {
      log::info("tune: " + label + " cannot fork (" + e.what() + "); it trains from scratch");
    }
  }
  return fresh_run(with(resolve_run(run).config(), change), label, false);
}

bool StoreExecutor::kept(int64_t id, int epoch) {
  return fork_point(*store_.find_run(id), epoch).owner.has_value();
}

bool StoreExecutor::train_to(const std::vector<int64_t>& ids, int epoch) {
  SweepOptions options = options_;
  if (epoch < plan_.epochs - 1) options.training.stop_after_epoch = epoch;
  Schedule schedule;
  schedule.ids = ids;
  schedule.turn = [&](const records::RunRow& run) {
    return records::is_finished(run.status) || run.epochs_done > epoch ? Turn::kSkip : Turn::kTrain;
  };
  const bool finished = train_schedule(store_, schedule, options, tally_);
  values_stale_ = true;
  return finished || !train::stop_requested();
}

const std::map<int64_t, std::map<int, double>>& StoreExecutor::values() {
  if (values_stale_) {
    values_.clear();
    for (const auto& v :
         store_.metric_values(plan_.sweep.name, plan_.metric, /*with_nulls=*/true)) {
      values_[v.run_id][v.epoch] = v.value;
    }
    values_stale_ = false;
  }
  return values_;
}

RunView StoreExecutor::view(int64_t id) {
  RunView v;
  const records::RunRow run = *store_.find_run(id);
  v.id = run.id;
  v.name = run.name;
  v.config = resolve_run(run).config();
  v.curve.status = run.status;
  if (run.fork) {
    v.parent = run.fork->parent_run_id;
    v.fork_epoch = run.fork->parent_epoch;
  }
  // The values up the fork chain, one ancestor at a time (a search's chain can be as deep as its
  // rounds): each ancestor counts up to the lowest fork epoch below it; a run's own values win.
  // A chain that leads back to a run (a database edited by hand) ends there.
  const auto& own = values();
  std::set<int64_t> seen;
  int upto = std::numeric_limits<int>::max();
  std::optional<records::RunRow> at = run;
  while (at && seen.insert(at->id).second) {
    if (const auto it = own.find(at->id); it != own.end()) {
      for (const auto& [epoch, value] : it->second) {
        if (epoch <= upto) v.curve.values.emplace(epoch, value);
      }
    }
    if (!at->fork) break;
    upto = std::min(upto, at->fork->parent_epoch);
    at = store_.find_run(at->fork->parent_run_id);
  }
  const std::vector<records::EpochRow> epochs = store_.epochs(id);
  if (!epochs.empty()) {
    const auto streak = epochs.back().metrics.find(kStreakMetric);
    v.curve.ends_non_finite = streak != epochs.back().metrics.end() && streak->second > 0;
  }
  return v;
}

int StoreExecutor::trained(int64_t id, int after, int upto) {
  int count = 0;
  for (const records::EpochRow& row : store_.epochs(id)) {
    count += row.epoch > after && row.epoch <= upto;
  }
  return count;
}

std::vector<records::DiagnosisAdvice> StoreExecutor::diagnose(int64_t id, int epoch) {
  const records::RunRow run = *store_.find_run(id);
  if (auto stored = store_.diagnosis_advice(run.id, epoch)) return *stored;
  const ForkPoint at = fork_point(run, epoch);
  train::DiagnoseOptions options;
  if (at.owner) options.epoch = epoch;
  options.batches = static_cast<int>(plan_.block.diagnose_batches);
  options.cosine_min = plan_.block.cosine_min;
  options.threads = options_.training.threads;
  log::info("tune: diagnosing run " + run.name + " at " +
            (at.owner ? "epoch " + std::to_string(epoch) : std::string("its initial weights")));
  try {
    // The checkpoint of the fork point (an ancestor's for an epoch before the run's own), under
    // the run's policy.
    std::optional<records::EpochRow> checkpoint;  // unset: the initial weights
    const train::RunInput input = resolve_run(run);
    if (at.owner) checkpoint = train::pick_checkpoint(input, store_.epochs(at.owner->id), options);
    records::Diagnosis d = train::diagnose(input, checkpoint, options);
    d.run_id = run.id;
    d.epoch = at.owner ? epoch : -1;
    store_.record_diagnosis(d);
    return d.advice;
  } catch (const CheckpointError& e) {
    log::warn("tune: cannot diagnose run " + run.name + " (" + e.what() +
              "); its candidates come from the move order alone");
    return {};
  }
}

void StoreExecutor::prune(const records::PruneDecisionRow& decision) {
  if (!store_.prune_pending_run(decision)) return;  // another process of the search did
  const records::RunRow run = *store_.find_run(decision.run_id);
  log::info("tune: " + run.name + " [" + run.label + "] stops at epoch " +
            std::to_string(decision.epoch) + ": " + decision.reason);
}

std::pair<double, double> StoreExecutor::shares(int64_t id) {
  if (auto it = shares_.find(id); it != shares_.end()) return it->second;
  const records::RunRow run = *store_.find_run(id);
  std::pair<double, double> share = {kNaN, kNaN};
  try {
    const train::ForwardWork work = train::forward_work(resolve_run(run).config());
    share = {work.fp32_share(), work.fp8_share()};
  } catch (const std::exception& e) {
    log::warn("tune: cannot count the forward work of run " + run.name + " (" + e.what() +
              "); it is ranked as if all of it ran in fp32");
  }
  return shares_[id] = share;
}

double StoreExecutor::fp32_share(int64_t id) { return shares(id).first; }
double StoreExecutor::fp8_share(int64_t id) { return shares(id).second; }

double StoreExecutor::speed(int64_t id) {
  for (const auto& t : store_.run_totals(plan_.sweep.name)) {
    if (t.run_id == id) return t.mean_fps.value_or(0);
  }
  return 0;
}

records::TuneSearchRow StoreExecutor::open_search(const records::TuneSearchRow& row) {
  return store_.ensure_tune_search(row);
}

void StoreExecutor::record_round(const records::TuneRoundRow& round) {
  store_.record_tune_round(round);
}

void StoreExecutor::record_candidate(const records::TuneCandidateRow& candidate) {
  store_.record_tune_candidate(candidate);
}

void StoreExecutor::update_candidate(const records::TuneCandidateRow& candidate) {
  store_.update_tune_candidate(candidate);
}

void StoreExecutor::finish_search(const records::TuneSearchRow& search) {
  store_.finish_tune_search(search);
}

}  // namespace amptune::app
