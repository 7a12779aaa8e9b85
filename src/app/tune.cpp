// app/tune.h: the search of amptune tune on the results database.
#include "app/tune.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "app/prune_rules.h"
#include "app/inspect.h"
#include "app/prune_sweep.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "core/settings.h"
#include "train/diagnose.h"
#include "train/model_info.h"
#include "train/plan.h"

namespace amptune::app {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Config with(const Config& base, const Overrides& overrides) {
  Config config = base;
  for (const auto& [key, value] : overrides) config.set(key, value);
  return config;
}

// The keys of `config` that differ from `base`, as an ordered JSON object (a run's axes).
nlohmann::ordered_json changed_keys(const Config& config, const Config& base) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const KeySpec& spec : base.schema().keys()) {
    if (config.at(spec.key) != base.at(spec.key)) out[spec.key] = config.at(spec.key);
  }
  return out;
}

std::vector<std::string> all_keys(const Config& config) {
  std::vector<std::string> keys;
  for (const KeySpec& spec : config.schema().keys()) keys.push_back(spec.key);
  return keys;
}

// A search and what it refers to, as stored.
TuneOutcome load_outcome(const store::Store& store, const store::TuneSearchRow& search) {
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
  return out;
}

// 0.0312 -> "3.12 %".
std::string percent_text(double share) {
  std::ostringstream out;
  out.precision(3);
  out << share * 100 << " %";
  return out.str();
}

bool ended(const store::RunRow& run) {
  return run.status == store::RunStatus::kDone || run.status == store::RunStatus::kDiverged ||
         run.status == store::RunStatus::kFailed || run.status == store::RunStatus::kPruned;
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
  const TuneBlock& block = *plan.sweep.tune;
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
  // The metric and its direction, from the model's definition.
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
  plan.tolerance.abs = block.tolerance_abs;
  plan.tolerance.rel = block.tolerance_rel;
  plan.budget =
      static_cast<int>(block.budget_epochs > 0 ? block.budget_epochs : int64_t{8} * plan.epochs);
  if (plan.budget < 2 * plan.epochs + 1) {
    throw ConfigError(block.budget_loc.prefix() + "tune.budget.epochs " +
                      std::to_string(plan.budget) + " cannot train the reference and the start (" +
                      std::to_string(2 * plan.epochs) + " epochs) and one candidate epoch; give " +
                      "at least " + std::to_string(2 * plan.epochs + 1));
  }
  if (data) {
    train::check_data(reference);
    train::check_data(start);
    plan.reference_fingerprint = train::data_fingerprint(reference);
    plan.start_fingerprint = train::data_fingerprint(start);
  }
  return plan;
}

namespace {

// One search: each step reads what the database holds and does what is missing.
class Search {
 public:
  Search(store::Store& store, const TunePlan& plan, const SweepOptions& options)
      : store_(store), plan_(plan), options_(options), block_(plan.block()) {}

  TuneOutcome run();

 private:
  using Candidate = store::TuneCandidateRow;

  store::RunRow fresh_run(const Config& config, int cell_index, const std::string& label,
                          const std::string& fingerprint);
  // Where a run's state at `epoch` is kept: the run itself, or the ancestor whose epoch it is
  // (a fork's epochs up to its parent's epoch are the parent's), with the overrides that lead
  // from that run's config to this one's. Epoch -1, or an epoch whose checkpoint is not kept:
  // no fork point (fresh runs).
  struct ForkPoint {
    std::optional<store::RunRow> owner;
    int epoch = -1;
    Overrides overrides;  // owner's config + these = the run's
  };
  ForkPoint fork_point(const store::RunRow& run, int epoch);
  // The run of `config` (= the fork point's run with `change`): a fork from the fork point, or a
  // fresh run when there is none or the change cannot fork.
  store::RunRow candidate_run(const ForkPoint& at, const Config& config, const Overrides& change,
                              const std::string& label);
  // Trains each run until it has recorded `epoch` or ended; false when a signal stopped it.
  bool train_to(const std::vector<int64_t>& ids, int epoch);
  // Whether `epochs` more fit the budget (stop_reason_ says why not).
  bool affordable(int epochs, const std::string& what);
  // Adds to the ledger the epochs `id` recorded itself after `after`, up to `upto`.
  void count_trained(int64_t id, int after, int upto);
  std::map<int, double> own_values(int64_t run_id);
  std::map<int, double> lineage_values(int64_t run_id);
  double final_value(int64_t run_id) { return value_at(run_id, plan_.epochs - 1); }
  double value_at(int64_t run_id, int epoch);
  double ref_value(int epoch) {
    auto it = reference_.find(epoch);
    return it == reference_.end() ? kNaN : it->second;
  }
  // The advice of a diagnosis of `run` at its fork point `at` (stored, or made and stored).
  std::vector<store::DiagnosisAdvice> advice_of(const store::RunRow& run, const ForkPoint& at);
  // A round's candidates through successive halving; the survivors' final outcomes. False when
  // stopped (signal, budget).
  bool halve(std::vector<Candidate>& round, int fork_epoch);
  // Round `round`'s candidates, one run per move from the fork point `at` of the run of
  // `config`, recorded in order.
  std::vector<Candidate> record_candidates(int round, const ForkPoint& at, const Config& config,
                                           const std::vector<TuneMove>& moves);
  void judge_final(Candidate& c);
  std::optional<Candidate> bisect(const Candidate& solution, int& round);
  bool better_answer(const Candidate& a, const Candidate& b);
  // The best of `solutions` by the objective, its fp32 modules bisected (rounds after `round`);
  // finishes the search as answered.
  TuneOutcome answer(const std::vector<Candidate>& solutions, int round);
  // The share of run `id`'s forward multiply-accumulates in fp32 (train::forward_work), measured
  // once per run; NaN (with a warning) when its model or data cannot be loaded here.
  double fp32_share(int64_t id);
  TuneOutcome finish(const std::string& status, const std::optional<Candidate>& answer,
                     const std::string& note);
  TuneOutcome outcome();

  store::Store& store_;
  const TunePlan& plan_;
  const SweepOptions& options_;
  const TuneBlock& block_;
  store::TuneSearchRow search_;
  std::map<int, double> reference_;  // the reference's metric per epoch
  int spent_ = 0;                    // epochs the search's steps train (the ledger)
  std::string stop_reason_;          // why a step did not run (budget), for the note
  bool stopped_ = false;             // a signal
  Tally tally_;
  std::vector<store::Store::MetricValue> values_;  // the sweep's values of the metric, as last read
  std::map<int64_t, double> shares_;               // fp32_share by run id
  bool values_stale_ = true;
};

store::RunRow Search::fresh_run(const Config& config, int cell_index, const std::string& label,
                                const std::string& fingerprint) {
  Cell cell;
  cell.index = cell_index;
  cell.axes = changed_keys(config, plan_.base);
  cell.hash = config.hash();
  cell.base = std::make_shared<const Config>(plan_.base);
  store::RunSpec spec = cell_spec(plan_.sweep, cell, config, fingerprint);
  spec.label = label;
  return store_.ensure_run(search_.sweep_id, spec);
}

Search::ForkPoint Search::fork_point(const store::RunRow& run, int epoch) {
  ForkPoint at;
  if (epoch < 0) return at;
  store::RunRow owner = run;
  std::vector<nlohmann::json> steps;  // overrides from the owner down to `run`, innermost first
  std::set<int64_t> seen{owner.id};
  while (owner.fork && epoch <= owner.fork->parent_epoch) {
    // (The store checked overrides_json is an object when it is not empty.)
    const std::string& overrides = owner.fork->overrides_json;
    steps.push_back(overrides.empty() ? nlohmann::json::object()
                                      : nlohmann::json::parse(overrides));
    std::optional<store::RunRow> parent = store_.find_run(owner.fork->parent_run_id);
    if (!parent || !seen.insert(parent->id).second) {
      throw StoreError(store_.path() + ": run " + owner.name + "'s fork parent " +
                       std::to_string(owner.fork->parent_run_id) +
                       (parent ? " leads back to it" : " is not in the database"));
    }
    owner = *parent;
  }
  bool kept = false;
  for (const store::EpochRow& row : store_.epochs(owner.id)) {
    kept = kept || (row.epoch == epoch && row.checkpoint);
  }
  if (!kept) return at;
  nlohmann::json merged = nlohmann::json::object();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    for (const auto& [key, value] : it->items()) merged[key] = value;
  }
  for (const auto& [key, value] : merged.items()) at.overrides.emplace_back(key, value);
  at.owner = owner;
  at.epoch = epoch;
  return at;
}

store::RunRow Search::candidate_run(const ForkPoint& at, const Config& config,
                                    const Overrides& change, const std::string& label) {
  if (at.owner && at.epoch < plan_.epochs - 1) {
    Overrides overrides = at.overrides;
    for (const auto& [key, value] : change) {
      auto same = [&key = key](const auto& kv) { return kv.first == key; };
      overrides.erase(std::remove_if(overrides.begin(), overrides.end(), same), overrides.end());
      overrides.emplace_back(key, value);
    }
    try {
      return store_.ensure_run(
          search_.sweep_id, train::plan_fork(*at.owner, at.epoch, overrides, false, label, false));
    } catch (const ConfigError& e) {
      log::info("tune: " + label + " cannot fork (" + e.what() + "); it trains from scratch");
    }
  }
  return fresh_run(with(config, change), 1, label, plan_.start_fingerprint);
}

bool Search::train_to(const std::vector<int64_t>& ids, int epoch) {
  SweepOptions options = options_;
  if (epoch < plan_.epochs - 1) options.training.stop_after_epoch = epoch;
  std::set<int64_t> attempted, reported;
  for (;;) {
    bool waiting = false;
    for (const int64_t id : ids) {
      if (stop_requested()) {
        stopped_ = true;
        return false;
      }
      const store::RunRow run = *store_.find_run(id);
      if (ended(run) || run.epochs_done > epoch || attempted.count(id)) continue;
      const auto result = train_if_claimed(store_, run, options, tally_);
      if (!result) {
        if (reported.insert(id).second) {
          log::info("tune: run " + run.name + " is being trained by another process; waiting");
        }
        waiting = true;
        continue;
      }
      attempted.insert(id);  // once per step: a failure stays failed
      values_stale_ = true;
      if (result->outcome == train::Outcome::kInterrupted && stop_requested()) {
        stopped_ = true;
        return false;
      }
    }
    if (!waiting) return true;
    // Poll in short naps: a signal stops the wait within a tenth of a second.
    for (double slept = 0; slept < options_.poll_seconds && !stop_requested(); slept += 0.1) {
      nap(0.1);
    }
    values_stale_ = true;
  }
}

bool Search::affordable(int epochs, const std::string& what) {
  if (spent_ + epochs <= plan_.budget) return true;
  stop_reason_ = "the budget of " + std::to_string(plan_.budget) + " epochs is spent (" +
                 std::to_string(spent_) + " spent; " + what + " needs up to " +
                 std::to_string(epochs) + " more)";
  return false;
}

void Search::count_trained(int64_t id, int after, int upto) {
  for (const store::EpochRow& row : store_.epochs(id)) {
    spent_ += row.epoch > after && row.epoch <= upto;
  }
}

std::map<int, double> Search::own_values(int64_t run_id) {
  if (values_stale_) {
    values_ = store_.metric_values(plan_.sweep.name, plan_.metric, /*with_nulls=*/true);
    values_stale_ = false;
  }
  std::map<int, double> out;
  for (const auto& v : values_) {
    if (v.run_id == run_id) out[v.epoch] = v.value;
  }
  return out;
}

std::map<int, double> Search::lineage_values(int64_t run_id) {
  // Up the fork chain, one ancestor at a time (a search's chain can be as deep as its rounds):
  // each ancestor counts up to the lowest fork epoch below it; a run's own values win. A chain
  // that leads back to a run (a database edited by hand) ends there.
  std::map<int, double> out;
  std::set<int64_t> seen;
  int upto = std::numeric_limits<int>::max();
  std::optional<store::RunRow> run = store_.find_run(run_id);
  while (run && seen.insert(run->id).second) {
    for (const auto& [epoch, value] : own_values(run->id)) {
      if (epoch <= upto) out.emplace(epoch, value);
    }
    if (!run->fork) break;
    upto = std::min(upto, run->fork->parent_epoch);
    run = store_.find_run(run->fork->parent_run_id);
  }
  return out;
}

double Search::value_at(int64_t run_id, int epoch) {
  const auto values = lineage_values(run_id);
  auto it = values.find(epoch);
  return it == values.end() ? kNaN : it->second;
}

std::vector<store::DiagnosisAdvice> Search::advice_of(const store::RunRow& run,
                                                      const ForkPoint& at) {
  if (auto stored = store_.diagnosis_advice(run.id, at.epoch)) return *stored;
  train::DiagnoseOptions options;
  if (at.owner) options.epoch = at.epoch;
  options.batches = static_cast<int>(block_.diagnose_batches);
  options.cosine_min = block_.cosine_min;
  options.threads = options_.training.threads;
  log::info("tune: diagnosing run " + run.name + " at " +
            (at.owner ? "epoch " + std::to_string(at.epoch) : std::string("its initial weights")));
  try {
    // The checkpoint of the fork point (an ancestor's for an epoch before the run's own), under
    // the run's policy.
    std::optional<store::EpochRow> checkpoint;  // unset: the initial weights
    if (at.owner) checkpoint = train::pick_checkpoint(run, store_.epochs(at.owner->id), options);
    store::Diagnosis d = train::diagnose(run, checkpoint, options);
    d.run_id = run.id;
    d.epoch = at.owner ? at.epoch : -1;
    store_.record_diagnosis(d);
    return d.advice;
  } catch (const CheckpointError& e) {
    log::warn("tune: cannot diagnose run " + run.name + " (" + e.what() +
              "); its candidates come from the move order alone");
    return {};
  }
}

bool Search::halve(std::vector<Candidate>& round, int fork_epoch) {
  const int last = plan_.epochs - 1;
  const std::vector<int> rungs = tune_rungs(fork_epoch, last, static_cast<int>(block_.eta),
                                            static_cast<int>(block_.min_epochs));
  std::vector<Candidate*> alive;
  for (Candidate& c : round) alive.push_back(&c);
  std::map<int64_t, int> reached;  // run id -> the epoch it stands at
  for (const Candidate& c : round) reached[c.run_id] = c.fork_epoch;
  PruneSettings rule;
  rule.rule = PruneRule::kAsha;
  rule.metric = plan_.metric;
  rule.higher_is_better = plan_.tolerance.higher_is_better;
  rule.grace_epochs = static_cast<int>(block_.min_epochs);
  rule.eta = static_cast<int>(block_.eta);
  for (size_t k = 0; k < rungs.size(); ++k) {
    const int rung = rungs[k];
    if (alive.size() == 1 && rung != last) continue;  // alone: nothing to compare it with
    int cost = 0;
    std::vector<int64_t> ids;
    for (Candidate* c : alive) {
      cost += rung - reached[c->run_id];
      ids.push_back(c->run_id);
    }
    if (!affordable(cost, "rung " + std::to_string(k) + " (epoch " + std::to_string(rung) +
                              ") of " + std::to_string(alive.size()) + " candidates")) {
      return false;
    }
    if (!train_to(ids, rung)) return false;
    for (Candidate* c : alive) {
      count_trained(c->run_id, reached[c->run_id], rung);
      reached[c->run_id] = rung;
    }
    // Those that ended early (diverged, failed) are out.
    std::vector<Candidate*> running;
    for (Candidate* c : alive) {
      const store::RunRow run = *store_.find_run(c->run_id);
      if (run.status == store::RunStatus::kDiverged || run.status == store::RunStatus::kFailed) {
        c->outcome = run.status == store::RunStatus::kDiverged ? "diverged" : "failed";
        c->value = value_at(c->run_id, run.epochs_done - 1);
        store_.update_tune_candidate(*c);
      } else {
        running.push_back(c);
      }
    }
    alive = running;
    if (rung == last || alive.empty()) break;
    // The rung's decision: asha over the round's candidates, epochs counted from the fork.
    PruneTable table;
    const int shift = fork_epoch + 1;
    for (Candidate* c : alive) {
      PruneCell cell;
      cell.id = c->run_id;
      for (const auto& [epoch, value] : lineage_values(c->run_id)) {
        if (epoch >= shift && epoch <= rung) cell.values[epoch - shift] = value;
      }
      table.push_back(cell);
    }
    std::vector<Candidate*> kept;
    for (Candidate* c : alive) {
      const PruneDecision d = decide_prune(table, rule, c->run_id, rung - shift);
      c->rung = static_cast<int>(k);
      c->value = value_at(c->run_id, rung);
      c->reference_value = ref_value(rung);
      if (!d.stop) {
        kept.push_back(c);
        store_.update_tune_candidate(*c);
        continue;
      }
      c->outcome = "pruned";
      store_.update_tune_candidate(*c);
      store::PruneDecisionRow row = decision_row(d, rule, "stop");
      row.epoch = rung;
      row.reason = "tune round " + std::to_string(c->round) + ", " + d.reason;
      if (store_.prune_pending_run(row)) {  // false: another process of the search did
        const store::RunRow run = *store_.find_run(c->run_id);
        log::info("tune: " + run.name + " [" + run.label + "] stops at rung " + std::to_string(k) +
                  ": " + d.reason);
      }
    }
    alive = kept;
  }
  for (Candidate* c : alive) judge_final(*c);
  return true;
}

void Search::judge_final(Candidate& c) {
  const int last = plan_.epochs - 1;
  c.value = final_value(c.run_id);
  c.reference_value = ref_value(last);
  c.outcome = plan_.tolerance.within(c.value, c.reference_value) ? "within" : "outside";
  store_.update_tune_candidate(c);
}

// Whether `a` is a better answer than `b` by the objective (then the metric, then the order).
bool Search::better_answer(const Candidate& a, const Candidate& b) {
  auto config = [&](const Candidate& c) {
    const store::RunRow run = *store_.find_run(c.run_id);
    return Config::from_json(run.config_json, run.name);
  };
  if (block_.objective == "speed") {
    std::map<int64_t, double> fps;
    for (const auto& t : store_.run_totals(plan_.sweep.name))
      fps[t.run_id] = t.mean_fps.value_or(0);
    if (fps[a.run_id] != fps[b.run_id]) return fps[a.run_id] > fps[b.run_id];
  } else {
    const auto ra = precision_rank(config(a), fp32_share(a.run_id));
    const auto rb = precision_rank(config(b), fp32_share(b.run_id));
    if (ra != rb) return ra < rb;
  }
  const double sa = plan_.tolerance.shortfall(a.value, a.reference_value);
  const double sb = plan_.tolerance.shortfall(b.value, b.reference_value);
  if (sa != sb) return sa < sb;
  return std::make_pair(a.round, a.seq) < std::make_pair(b.round, b.seq);
}

double Search::fp32_share(int64_t id) {
  if (auto it = shares_.find(id); it != shares_.end()) return it->second;
  const store::RunRow run = *store_.find_run(id);
  double share = kNaN;
  try {
    share = train::forward_work(Config::from_json(run.config_json, "run " + run.name)).fp32_share();
  } catch (const std::exception& e) {
    log::warn("tune: cannot count the forward work of run " + run.name + " (" + e.what() +
              "); it is ranked as if all of it ran in fp32");
  }
  return shares_[id] = share;
}

// Bisects the fp32 modules of `solution`; returns the smallest solution found (unset: none
// smaller). Rounds of kind bisect, one probe each, continue the numbering in `round`.
std::optional<Search::Candidate> Search::bisect(const Candidate& solution, int& round) {
  const store::RunRow run = *store_.find_run(solution.run_id);
  const Config config = Config::from_json(run.config_json, run.name);
  const std::vector<std::string> modules = config.get_string_list("amp.fp32_modules");
  if (modules.size() < 2) return std::nullopt;
  // The probes continue from the solution's fork point with its overrides but fewer fp32
  // modules; a fresh solution's probes are fresh.
  ForkPoint at;
  if (run.fork) at = fork_point(run, run.fork->parent_epoch);
  std::vector<std::pair<std::vector<std::string>, bool>> probes;
  std::optional<Candidate> best;
  std::vector<std::string> kept;
  while (auto chunk = next_bisect_probe(modules, probes, kept)) {
    std::vector<std::string> rest = kept;
    for (const auto& m : *chunk) rest.erase(std::remove(rest.begin(), rest.end(), m), rest.end());
    ++round;
    const nlohmann::json dropped = *chunk;
    const std::string label = "tune bisect: fp32_modules without " + flow_yaml(dropped);
    const store::RunRow probe =
        candidate_run(at, config, {{"amp.fp32_modules", nlohmann::json(rest)}}, label);
    const int fork_epoch = probe.fork ? probe.fork->parent_epoch : -1;
    store_.record_tune_round({search_.id, round, "bisect", solution.run_id, fork_epoch,
                              std::nullopt, "bisection of " + flow_yaml(nlohmann::json(kept))});
    Candidate c;
    c.search_id = search_.id;
    c.round = round;
    c.move = "fp32_modules";
    c.change_json = nlohmann::json{{"amp.fp32_modules", rest}}.dump();
    c.reason =
        "bisection: does the solution stay within tolerance without " + flow_yaml(dropped) + "?";
    c.run_id = probe.id;
    c.parent_run_id = probe.fork ? probe.fork->parent_run_id : 0;
    c.fork_epoch = fork_epoch;
    store_.record_tune_candidate(c);
    if (!affordable(plan_.epochs - 1 - c.fork_epoch, "a bisection probe")) break;
    if (!train_to({probe.id}, plan_.epochs - 1)) break;
    count_trained(probe.id, c.fork_epoch, plan_.epochs - 1);
    judge_final(c);
    const bool within = c.outcome == "within";
    probes.emplace_back(*chunk, within);
    if (within) best = c;
  }
  return best;
}

TuneOutcome Search::finish(const std::string& status, const std::optional<Candidate>& answer,
                           const std::string& note) {
  search_.status = status;
  search_.note = note;
  search_.epochs_spent = spent_;
  std::vector<Candidate> moves;  // the search rounds' candidates (bisection is no grid axis)
  std::set<int> bisect_rounds;
  for (const auto& r : store_.tune_rounds(search_.id)) {
    if (r.kind == "bisect") bisect_rounds.insert(r.round);
  }
  for (const auto& c : store_.tune_candidates(search_.id)) {
    if (!bisect_rounds.count(c.round)) moves.push_back(c);
  }
  search_.grid_epochs = grid_epochs(moves, plan_.epochs);
  search_.reference_value = ref_value(plan_.epochs - 1);
  if (answer) {
    const store::RunRow run = *store_.find_run(answer->run_id);
    if (status == "answered" && block_.objective == "precision") {
      const double share = fp32_share(run.id);
      if (!std::isnan(share)) {
        search_.note += "; " + percent_text(share) + " of the forward multiply-accumulates in fp32";
      }
    }
    search_.answer_run_id = run.id;
    search_.answer_value = answer->value;
    search_.answer_yaml = changed_yaml(Config::from_json(run.config_json, run.name), plan_.base,
                                       all_keys(plan_.base));
  }
  store_.finish_tune_search(search_);
  return outcome();
}

TuneOutcome Search::outcome() {
  TuneOutcome out;
  for (const auto& s : store_.tune_searches(plan_.sweep.name)) {
    if (s.id == search_.id) out = load_outcome(store_, s);
  }
  out.tally = tally_;
  out.stopped = stopped_;
  return out;
}

TuneOutcome Search::run() {
  const Sweep& sweep = plan_.sweep;
  search_.sweep_id =
      store_.ensure_sweep(sweep.name, sweep.description, sweep.yaml_text, sweep.source_path);
  const store::RunRow reference =
      fresh_run(plan_.reference, 0, "tune reference", plan_.reference_fingerprint);
  const store::RunRow start = fresh_run(plan_.start, 1, "tune start", plan_.start_fingerprint);
  search_.block_json = block_.canonical;
  search_.metric = plan_.metric;
  search_.higher_is_better = plan_.tolerance.higher_is_better;
  search_.reference_run_id = reference.id;
  search_.start_run_id = start.id;
  search_ = store_.ensure_tune_search(search_);
  if (search_.status != "searching") return outcome();
  const int last = plan_.epochs - 1;

  // plan_tune checked that the budget covers the reference and the start.
  if (!train_to({reference.id, start.id}, last)) return outcome();
  count_trained(reference.id, -1, last);
  count_trained(start.id, -1, last);
  reference_ = own_values(reference.id);
  if (!std::isfinite(ref_value(last))) {
    const store::RunRow r = *store_.find_run(reference.id);
    return finish("exhausted", std::nullopt,
                  "the reference run " + r.name + " has no finite " + plan_.metric +
                      " at its last epoch (" + store::to_string(r.status) + "): nothing to " +
                      "compare with");
  }
  // Round 0: the start itself (not a stored candidate).
  Candidate node;
  node.search_id = search_.id;
  node.run_id = start.id;
  node.value = final_value(start.id);
  node.reference_value = ref_value(last);
  node.outcome = plan_.tolerance.within(node.value, node.reference_value) ? "within" : "outside";
  std::vector<Candidate> solutions;
  if (node.outcome == "within") solutions.push_back(node);
  int round = 0;
  bool lr_shifted = false;
  std::string end_note;
  std::optional<Candidate> closest;  // the best candidate outside tolerance so far
  while (solutions.empty()) {
    const store::RunRow run = *store_.find_run(node.run_id);
    ++round;
    // The candidates continue from the last epoch the run was within the band (-1: it never
    // was; they train from scratch): a checkpoint after it may hold the damage (NaN BatchNorm
    // statistics after an overflow).
    const std::map<int, double> lineage = lineage_values(run.id);
    const int exit = first_exit(lineage, reference_, plan_.tolerance).value_or(last);
    const int fork_epoch = round == 1 && block_.fork_from ? *block_.fork_from : exit - 1;
    const ForkPoint at = fork_point(run, fork_epoch);
    const int candidates_fork = at.owner && at.epoch < last ? at.epoch : -1;
    const Config config = Config::from_json(run.config_json, run.name);
    // The diagnosis looks where the run is outside the band (the damage shows there: at the
    // initial weights a planted overflow may not have grown yet), or at the fork epoch when
    // that checkpoint is not kept (a run that diverged in it).
    ForkPoint diagnosed = fork_point(run, std::max(exit, fork_epoch));
    if (!diagnosed.owner) diagnosed = at;
    const std::vector<store::DiagnosisAdvice> advice = advice_of(run, diagnosed);
    const std::vector<TuneMove> moves =
        candidate_moves(config, advice, block_.moves, candidates_fork, lr_shifted);
    if (moves.empty()) {
      end_note = "no allowed move changes the setting of run " + run.name +
                 " (tune.moves: " + flow_yaml(nlohmann::json(block_.moves)) + ")";
      break;
    }
    const std::string note = run.name + " leaves the band after epoch " +
                             std::to_string(fork_epoch) + "; " + std::to_string(advice.size()) +
                             " advice rows";
    store_.record_tune_round({search_.id, round, "search", run.id, candidates_fork,
                              diagnosed.owner ? diagnosed.epoch : -1, note});
    std::vector<Candidate> candidates = record_candidates(round, at, config, moves);
    if (!halve(candidates, candidates_fork)) break;
    std::optional<Candidate> best;
    for (const Candidate& c : candidates) {
      if (c.outcome == "within") solutions.push_back(c);
      if ((c.outcome == "within" || c.outcome == "outside") &&
          (!best || plan_.tolerance.shortfall(c.value, c.reference_value) <
                        plan_.tolerance.shortfall(best->value, best->reference_value))) {
        best = c;
      }
    }
    if (!solutions.empty()) break;
    if (!best) {
      end_note = "every candidate of round " + std::to_string(round) + " diverged or failed";
      break;
    }
    closest = best;
    lr_shifted = lr_shifted || best->move == "lr_dec_epoch";
    node = *best;
  }
  if (stopped_) return outcome();
  if (solutions.empty()) {
    if (!stop_reason_.empty()) end_note = stop_reason_;
    return finish("exhausted", closest, "no setting within tolerance: " + end_note);
  }
  return answer(solutions, round);
}

std::vector<Search::Candidate> Search::record_candidates(int round, const ForkPoint& at,
                                                         const Config& config,
                                                         const std::vector<TuneMove>& moves) {
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < moves.size(); ++i) {
    const TuneMove& m = moves[i];
    std::string label = "tune r" + std::to_string(round) + " " + m.move + ":";
    nlohmann::json change = nlohmann::json::object();
    for (const auto& [key, value] : m.change) {
      change[key] = value;
      label += " " + key + "=" + flow_yaml(value);
    }
    const store::RunRow r = candidate_run(at, config, m.change, label);
    Candidate c;
    c.search_id = search_.id;
    c.round = round;
    c.seq = static_cast<int>(i);
    c.move = m.move;
    c.change_json = change.dump();
    c.reason = m.reason;
    c.advice_rule = m.advice_rule;
    c.advice_module = m.advice_module;
    c.run_id = r.id;
    c.parent_run_id = r.fork ? r.fork->parent_run_id : 0;
    c.fork_epoch = r.fork ? r.fork->parent_epoch : -1;
    store_.record_tune_candidate(c);
    candidates.push_back(c);
  }
  return candidates;
}

TuneOutcome Search::answer(const std::vector<Candidate>& solutions, int round) {
  Candidate best = solutions.front();
  for (const Candidate& c : solutions) {
    if (better_answer(c, best)) best = c;
  }
  std::string note =
      "round " + std::to_string(best.round) +
      (best.move.empty() ? " (the start is within tolerance)" : ", move " + best.move);
  if (auto smaller = bisect(best, round)) {
    best = *smaller;
    // (The store checked change_json is an object; the key is the bisection's own.)
    const nlohmann::json change = best.change_json.empty()
                                      ? nlohmann::json::object()
                                      : nlohmann::json::parse(best.change_json);
    const auto modules = change.find("amp.fp32_modules");
    note += "; bisection kept " +
            std::to_string(modules == change.end() ? 0 : modules->size()) + " fp32 modules";
  }
  if (stopped_) return outcome();
  if (!stop_reason_.empty()) note += "; " + stop_reason_ + " before bisection ended";
  return finish("answered", best, note);
}

}  // namespace

TuneOutcome run_tune(store::Store& store, const TunePlan& plan, const SweepOptions& options) {
  return Search(store, plan, options).run();
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
                          int workers, const std::vector<std::string>& worker_args) {
  store::Store store(db);
  TuneCommand command;
  if (workers > 1) {
    store.ensure_sweep(plan.sweep.name, plan.sweep.description, plan.sweep.yaml_text,
                       plan.sweep.source_path);
    command.exit_code = run_workers(worker_args, workers, db, plan.sweep.name);
    command.outcome = tune_status(store, plan.sweep.name);
    return command;
  }
  command.outcome = run_tune(store, plan, options);
  command.exit_code = command.outcome->stopped ? static_cast<int>(ExitCode::kInterrupted)
                                               : command.outcome->tally.exit_code();
  return command;
}

}  // namespace amptune::app
