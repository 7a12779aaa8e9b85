// app/tune/tune_search.h: the algorithm of amptune tune, step by step as docs/TUNE.md numbers it.
#include "app/tune/tune_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "app/prune/prune_rules.h"
#include "app/prune/prune_sweep.h"
#include "app/views/table.h"
#include "core/log.h"

namespace amptune::app {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
using Candidate = records::TuneCandidateRow;

nlohmann::json change_json(const Overrides& change) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : change) out[key] = value;
  return out;
}

Overrides change_of(const Candidate& c) {
  // (The store checked change_json is an object.)
  Overrides out;
  if (c.change_json.empty()) return out;
  const nlohmann::json change = nlohmann::json::parse(c.change_json);
  for (const auto& [key, value] : change.items()) out.emplace_back(key, value);
  return out;
}

std::vector<std::string> all_keys(const Config& config) {
  std::vector<std::string> keys;
  for (const KeySpec& spec : config.schema().keys()) keys.push_back(spec.key);
  return keys;
}

class Search {
 public:
  Search(TuneExecutor& exec, const SearchSpec& spec)
      : exec_(exec), spec_(spec), block_(spec.block), last_(spec.epochs - 1) {}
  SearchResult run(int64_t sweep_id);

 private:
  // A round's plan: where its candidates fork from and which moves they make.
  struct RoundPlan {
    int fork_epoch = -1;
    int diagnosis_epoch = -1;
    std::vector<TuneMove> moves;
    std::string note;
  };

  std::vector<int64_t> reference_repeats(int64_t reference);
  std::string seed_noise_note();
  bool train_from_scratch(const std::vector<int64_t>& ids);
  Candidate start_node(int64_t start);
  std::vector<Candidate> search_rounds(Candidate node, std::string& end_note);
  RoundPlan plan_round(const RunView& node);
  std::vector<Candidate> record_candidates(const RunView& node, int fork_epoch,
                                           const std::vector<TuneMove>& moves);
  Candidate record_candidate(const RunView& from, int fork_epoch, const TuneMove& move, int seq);
  bool halve(std::vector<Candidate>& round, int fork_epoch);
  bool train_rung(std::vector<Candidate*>& alive, int k, int rung, std::map<int64_t, int>& reached);
  std::vector<Candidate*> decide_rung(const std::vector<Candidate*>& alive, int k, int rung,
                                      int fork_epoch);
  void judge_final(Candidate& c);
  Progress progress(const Candidate& c) {
    return progress_of(exec_.view(c.run_id).curve, reference_, last_, spec_.tolerance);
  }
  std::optional<Candidate> furthest(const std::vector<Candidate>& pool);
  std::optional<Candidate> try_union(const RunView& node, const std::vector<Candidate>& round,
                                     int fork_epoch);
  SearchResult answer(const std::vector<Candidate>& solutions, std::string noise);
  bool better_answer(const Candidate& a, const Candidate& b);
  std::optional<Candidate> bisect(const Candidate& solution, std::vector<std::string>& kept);
  std::vector<std::string> bisect_items(const Candidate& solution, const RunView& run);
  Overrides probe_change(const RunView& run, const std::vector<std::string>& kept,
                         const std::vector<std::string>& dropped, int64_t solution);
  void confirm(const Candidate& answer, std::string& note);
  SearchResult finish(records::TuneStatus status, const std::optional<Candidate>& answer,
                      const std::string& note);
  bool affordable(int epochs, const std::string& what);
  // Adds to the ledger the epochs run `id` recorded itself up to `upto` and not counted yet (a
  // run the search meets again, a bisection probe that is an earlier candidate, counts once).
  void count_trained(int64_t id, int upto) {
    int& counted = counted_.try_emplace(id, -1).first->second;
    if (upto <= counted) return;
    spent_ += exec_.trained(id, counted, upto);
    counted = upto;
  }
  double ref_value(int epoch) const {
    auto it = reference_.find(epoch);
    return it == reference_.end() ? kNaN : it->second;
  }
  bool train_to(const std::vector<int64_t>& ids, int epoch) {
    if (exec_.train_to(ids, epoch)) return true;
    stopped_ = true;
    return false;
  }
  SearchResult result() const { return {search_.id, stopped_}; }

  TuneExecutor& exec_;
  const SearchSpec& spec_;
  const TuneBlock& block_;
  const int last_;
  records::TuneSearchRow search_;
  std::map<int, double> reference_;  // the reference's metric per epoch
  std::vector<Candidate> repeats_;   // the reference trained with other seeds (round 0)
  std::vector<Candidate> tried_;     // the search rounds' candidates (the grid's moves)
  // The union candidates' items other than fp32 modules, by run: item -> (key, value before).
  std::map<int64_t, std::map<std::string, std::pair<std::string, nlohmann::json>>> undo_;
  std::optional<Candidate> closest_;  // the furthest candidate outside tolerance so far
  int round_ = 0;                     // the last round number used
  bool lr_shifted_ = false;
  int spent_ = 0;             // epochs the search's steps train (the ledger)
  std::map<int64_t, int> counted_;  // the ledger's last epoch counted, by run
  std::string stop_reason_;   // why a step did not run (budget), for the note
  bool stopped_ = false;      // a signal
};

// 1. The reference (with its seed repeats) and the start, trained to the end.
SearchResult Search::run(int64_t sweep_id) {
  const int64_t reference = exec_.fresh_run(spec_.reference, "tune reference", true);
  const int64_t start = exec_.fresh_run(spec_.start, "tune start");
  records::TuneSearchRow row;
  row.sweep_id = sweep_id;
  row.block_json = block_.canonical;
  row.metric = spec_.metric;
  row.higher_is_better = spec_.tolerance.higher_is_better;
  row.reference_run_id = reference;
  row.start_run_id = start;
  search_ = exec_.open_search(row);
  if (search_.status != records::TuneStatus::kSearching) return result();
  std::vector<int64_t> first = {reference, start};
  for (const int64_t id : reference_repeats(reference)) first.push_back(id);
  if (!train_from_scratch(first)) return result();
  reference_ = exec_.view(reference).curve.values;
  if (!std::isfinite(ref_value(last_))) {
    const RunView r = exec_.view(reference);
    return finish(records::TuneStatus::kExhausted, std::nullopt,
                  "the reference run " + r.name + " has no finite " + spec_.metric +
                      " at its last epoch (" + records::to_string(r.curve.status) +
                      "): nothing to compare with");
  }
  const std::string noise = seed_noise_note();
  // 2. The start within tolerance is the answer.
  const Candidate node = start_node(start);
  std::vector<Candidate> solutions;
  std::string end_note;
  if (node.outcome == Outcome::kWithin) {
    solutions.push_back(node);
  } else {
    solutions = search_rounds(node, end_note);
  }
  if (stopped_) return result();
  if (solutions.empty()) {
    if (!stop_reason_.empty()) end_note = stop_reason_;
    return finish(records::TuneStatus::kExhausted, closest_,
                  "no setting within tolerance: " + end_note + noise);
  }
  return answer(solutions, noise);
}

// tune.reference_repeats: the reference with seeds seed + 1 ... (round 0, kind reference).
std::vector<int64_t> Search::reference_repeats(int64_t reference) {
  std::vector<int64_t> ids;
  if (block_.reference_repeats < 2) return ids;
  exec_.record_round({search_.id, 0, records::TuneRoundKind::kReference, reference, -1,
                      std::nullopt,
                      "the reference with other seeds: the seed noise of " + spec_.metric});
  const int64_t seed = spec_.reference.get_int("seed");
  for (int64_t i = 1; i < block_.reference_repeats; ++i) {
    const Overrides change = {{"seed", seed + i}};
    Candidate c;
    c.search_id = search_.id;
    c.round = 0;
    c.seq = static_cast<int>(i - 1);
    c.move = TuneMoveKind::kSeed;
    c.change_json = change_json(change).dump();
    c.reason = "the reference with seed " + std::to_string(seed + i) + " (tune.reference_repeats)";
    c.run_id = exec_.fresh_run(with(spec_.reference, change),
                               "tune reference seed " + std::to_string(seed + i), true);
    exec_.record_candidate(c);
    repeats_.push_back(c);
    ids.push_back(c.run_id);
  }
  return ids;
}

// The repeats judged against the reference; a warning (and the note's text) when the tolerance
// is narrower than the seed noise they show.
std::string Search::seed_noise_note() {
  if (repeats_.empty()) return "";
  std::vector<double> finals = {ref_value(last_)};
  for (Candidate& c : repeats_) {
    judge_final(c);  // (a diverged repeat's value is not a final one: left out)
    if (c.outcome == Outcome::kWithin || c.outcome == Outcome::kOutside) finals.push_back(c.value);
  }
  const double noise = seed_noise(finals);
  const double margin = std::fabs(spec_.tolerance.limit(ref_value(last_)) - ref_value(last_));
  std::string note = "; seed noise of the reference " + significant(noise, 4) + " (range of " +
                     std::to_string(finals.size()) + " seeds)";
  if (margin < noise) {
    const std::string warning = "the tolerance (" + significant(margin, 4) +
                                ") is below the seed " + "noise of the reference (" +
                                significant(noise, 4) + " over " + std::to_string(finals.size()) +
                                " seeds): within or outside is " +
                                "partly chance; widen tune.tolerance or use a steadier metric";
    log::warn("tune: " + warning);
    note += ", above the tolerance";
  }
  return note;
}

bool Search::train_from_scratch(const std::vector<int64_t>& ids) {
  // plan_tune checked that the budget covers these.
  if (!train_to(ids, last_)) return false;
  for (const int64_t id : ids) count_trained(id, last_);
  return true;
}

// Round 0's node: the start itself (not a stored candidate).
Candidate Search::start_node(int64_t start) {
  Candidate node;
  node.search_id = search_.id;
  node.run_id = start;
  const RunView v = exec_.view(start);
  node.outcome = judge(v.curve, last_, ref_value(last_), spec_.tolerance);
  auto value = v.curve.values.find(last_);
  node.value = value == v.curve.values.end() ? kNaN : value->second;
  node.reference_value = ref_value(last_);
  return node;
}

// 3-7. Rounds from `node` until a candidate is within tolerance (the solutions), or no move is
// left, every candidate failed, the budget is spent or a signal came (`end_note` says which).
std::vector<Candidate> Search::search_rounds(Candidate node, std::string& end_note) {
  for (;;) {
    const RunView v = exec_.view(node.run_id);
    ++round_;
    const RoundPlan plan = plan_round(v);
    if (plan.moves.empty()) {
      end_note = "no allowed move changes the setting of run " + v.name +
                 " (tune.moves: " + moves_yaml(block_.moves) + ")";
      return {};
    }
    exec_.record_round({search_.id, round_, records::TuneRoundKind::kSearch, v.id, plan.fork_epoch,
                        plan.diagnosis_epoch, plan.note});
    std::vector<Candidate> round = record_candidates(v, plan.fork_epoch, plan.moves);
    tried_.insert(tried_.end(), round.begin(), round.end());
    if (!halve(round, plan.fork_epoch)) return {};
    std::vector<Candidate> solutions;
    for (const Candidate& c : round) {
      if (c.outcome == Outcome::kWithin) solutions.push_back(c);
    }
    if (!solutions.empty()) return solutions;
    if (auto u = try_union(v, round, plan.fork_epoch)) {
      if (u->outcome == Outcome::kWithin) return {*u};
      round.push_back(*u);
    }
    if (stopped_ || !stop_reason_.empty()) return {};
    std::optional<Candidate> best = furthest(round);
    if (!best) {
      end_note = "every candidate of round " + std::to_string(round_) + " failed";
      return {};
    }
    closest_ = best;
    lr_shifted_ = lr_shifted_ || best->move == TuneMoveKind::kLrDecEpoch;
    node = *best;
  }
}

// 3-5. The candidates continue from the last epoch the run was within the band (-1: it never
// was, or that state is not kept: they train from scratch): a checkpoint after it may hold the
// damage (NaN BatchNorm statistics after an overflow). The diagnosis looks where the run leaves
// the band (the damage shows there: at the initial weights a planted overflow may not have grown
// yet), or at the fork epoch when that state is not kept (a run that diverged in it).
Search::RoundPlan Search::plan_round(const RunView& node) {
  RoundPlan plan;
  const int exit = exit_epoch(node.curve.values, reference_, last_, spec_.tolerance).value_or(last_);
  const int fork = round_ == 1 && block_.fork_from ? *block_.fork_from : exit - 1;
  plan.fork_epoch = fork >= 0 && fork < last_ && exec_.kept(node.id, fork) ? fork : -1;
  plan.diagnosis_epoch = std::max(exit, fork);
  if (!exec_.kept(node.id, plan.diagnosis_epoch)) plan.diagnosis_epoch = plan.fork_epoch;
  const std::vector<records::DiagnosisAdvice> advice =
      exec_.diagnose(node.id, plan.diagnosis_epoch);
  plan.moves = candidate_moves(node.config, advice, block_.moves, plan.fork_epoch, lr_shifted_);
  plan.note = node.name + " leaves the band after epoch " + std::to_string(fork) + "; " +
              std::to_string(advice.size()) + " advice rows";
  return plan;
}

std::vector<Candidate> Search::record_candidates(const RunView& node, int fork_epoch,
                                                 const std::vector<TuneMove>& moves) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < moves.size(); ++i) {
    out.push_back(record_candidate(node, fork_epoch, moves[i], static_cast<int>(i)));
  }
  return out;
}

Candidate Search::record_candidate(const RunView& from, int fork_epoch, const TuneMove& m,
                                   int seq) {
  std::string label = "tune r" + std::to_string(round_) + " " + to_string(m.move) + ":";
  for (const auto& [key, value] : m.change) label += " " + key + "=" + flow_yaml(value);
  const RunView run = exec_.view(exec_.candidate_run(from.id, fork_epoch, m.change, label));
  Candidate c;
  c.search_id = search_.id;
  c.round = round_;
  c.seq = seq;
  c.move = m.move;
  c.change_json = change_json(m.change).dump();
  c.reason = m.reason;
  c.advice_rule = m.advice_rule;
  c.advice_module = m.advice_module;
  c.run_id = run.id;
  c.parent_run_id = run.parent;
  c.fork_epoch = run.parent ? run.fork_epoch : -1;
  exec_.record_candidate(c);
  return c;
}

// 6. Successive halving over a round's candidates; the survivors judged at the end. False when
// stopped (signal, budget).
bool Search::halve(std::vector<Candidate>& round, int fork_epoch) {
  const std::vector<int> rungs = tune_rungs(fork_epoch, last_, static_cast<int>(block_.eta),
                                            static_cast<int>(block_.min_epochs));
  std::vector<Candidate*> alive;
  std::map<int64_t, int> reached;  // run id -> the epoch it stands at
  for (Candidate& c : round) {
    alive.push_back(&c);
    reached[c.run_id] = c.fork_epoch;
  }
  for (size_t k = 0; k < rungs.size(); ++k) {
    const int rung = rungs[k];
    if (alive.size() == 1 && rung != last_) continue;  // alone: nothing to compare it with
    if (!train_rung(alive, static_cast<int>(k), rung, reached)) return false;
    if (rung == last_ || alive.empty()) break;
    alive = decide_rung(alive, static_cast<int>(k), rung, fork_epoch);
  }
  for (Candidate* c : alive) judge_final(*c);
  return true;
}

// Trains the alive candidates to `rung`; those that ended early (diverged, failed) are out with
// their outcome.
bool Search::train_rung(std::vector<Candidate*>& alive, int k, int rung,
                        std::map<int64_t, int>& reached) {
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
  std::vector<Candidate*> running;
  for (Candidate* c : alive) {
    count_trained(c->run_id, rung);
    reached[c->run_id] = rung;
    // (A candidate pruned at this rung by an earlier pass stays for the rung's decision.)
    const records::RunStatus status = exec_.view(c->run_id).curve.status;
    if (status == records::RunStatus::kDiverged || status == records::RunStatus::kFailed) {
      judge_final(*c);
    } else {
      running.push_back(c);
    }
  }
  alive = running;
  return true;
}

// The rung's decision: asha over the round's candidates, epochs counted from the fork.
std::vector<Candidate*> Search::decide_rung(const std::vector<Candidate*>& alive, int k, int rung,
                                            int fork_epoch) {
  PruneSettings rule;
  rule.rule = PruneRule::kAsha;
  rule.metric = spec_.metric;
  rule.higher_is_better = spec_.tolerance.higher_is_better;
  rule.grace_epochs = static_cast<int>(block_.min_epochs);
  rule.eta = static_cast<int>(block_.eta);
  PruneTable table;
  const int shift = fork_epoch + 1;
  for (Candidate* c : alive) {
    PruneCell cell;
    cell.id = c->run_id;
    for (const auto& [epoch, value] : exec_.view(c->run_id).curve.values) {
      if (epoch >= shift && epoch <= rung) cell.values[epoch - shift] = value;
    }
    table.push_back(cell);
  }
  std::vector<Candidate*> kept;
  for (Candidate* c : alive) {
    const PruneDecision d = decide_prune(table, rule, c->run_id, rung - shift);
    const auto& values = exec_.view(c->run_id).curve.values;
    c->rung = k;
    c->value = values.count(rung) ? values.at(rung) : kNaN;
    c->reference_value = ref_value(rung);
    c->outcome = d.stop ? Outcome::kPruned : Outcome::kPending;
    exec_.update_candidate(*c);
    if (!d.stop) {
      kept.push_back(c);
      continue;
    }
    records::PruneDecisionRow row = decision_row(d, rule, records::PruneAction::kStop);
    row.epoch = rung;
    row.reason = "tune round " + std::to_string(c->round) + ", " + d.reason;
    exec_.prune(row);
  }
  return kept;
}

// A candidate's outcome from its curve (tune_rules.h judge); a candidate that did not reach the
// end keeps, as its value, its last finite one against the reference's there.
void Search::judge_final(Candidate& c) {
  const RunView v = exec_.view(c.run_id);
  const Outcome outcome = judge(v.curve, last_, ref_value(last_), spec_.tolerance);
  c.outcome = outcome;
  int at = last_;
  if (outcome == Outcome::kDiverged || outcome == Outcome::kFailed) {
    at = progress_of(v.curve, reference_, last_, spec_.tolerance).reached - 1;
  }
  auto value = v.curve.values.find(at);
  c.value = value == v.curve.values.end() ? kNaN : value->second;
  c.reference_value = ref_value(at);
  exec_.update_candidate(c);
}

// 7. The candidate that got furthest (diverged or not; failed ones are out), ties to the
// earlier.
std::optional<Candidate> Search::furthest(const std::vector<Candidate>& pool) {
  std::optional<Candidate> best;
  Progress best_progress;
  for (const Candidate& c : pool) {
    if (c.outcome == Outcome::kFailed) continue;
    const Progress p = progress(c);
    if (!best || further(p, best_progress)) {
      best = c;
      best_progress = p;
    }
  }
  return best;
}

// 7. The union of the round's moves that each got further than the round's start, as one more
// candidate (a round of kind union); unset when fewer than two did, or the union is one of them.
std::optional<Candidate> Search::try_union(const RunView& node, const std::vector<Candidate>& round,
                                           int fork_epoch) {
  const Progress from = progress_of(node.curve, reference_, last_, spec_.tolerance);
  std::vector<TuneMove> helped;
  for (const Candidate& c : round) {
    if (c.outcome != Outcome::kFailed && further(progress(c), from)) {
      helped.push_back({*c.move, change_of(c), c.reason, c.advice_rule, c.advice_module});
    }
  }
  if (helped.size() < 2) return std::nullopt;
  const Overrides change = union_change(node.config, helped);
  for (const Candidate& c : round) {
    if (change_json(change_of(c)) == change_json(change)) return std::nullopt;
  }
  ++round_;
  exec_.record_round({search_.id, round_, records::TuneRoundKind::kUnion, node.id, fork_epoch,
                      std::nullopt,
                      "the union of the " + std::to_string(helped.size()) + " moves of round " +
                          std::to_string(round_ - 1) + " that each got further than " + node.name});
  std::string moves;
  for (const TuneMove& m : helped) moves += (moves.empty() ? "" : ", ") + to_string(m.move);
  TuneMove u{TuneMoveKind::kUnion, change, "the moves that each got further, together: " + moves,
             std::nullopt, ""};
  std::vector<Candidate> alone = {record_candidate(node, fork_epoch, u, 0)};
  for (const auto& [key, value] : change) {
    if (!is_module_list(key)) {
      undo_[alone[0].run_id][key + ": " + flow_yaml(value)] = {key, node.config.at(key)};
    }
  }
  if (!halve(alone, fork_epoch)) return std::nullopt;
  return alone[0];
}

// 8-9. The best solution by the objective, its items bisected, confirmed from scratch.
SearchResult Search::answer(const std::vector<Candidate>& solutions, std::string noise) {
  Candidate best = solutions.front();
  for (const Candidate& c : solutions) {
    if (better_answer(c, best)) best = c;
  }
  std::string note =
      "round " + std::to_string(best.round) +
      (best.move ? ", move " + to_string(*best.move) : " (the start is within tolerance)");
  std::vector<std::string> kept;
  if (auto smaller = bisect(best, kept)) {
    best = *smaller;
    note += "; bisection kept " + flow_yaml(nlohmann::json(kept));
  }
  if (stopped_) return result();
  if (!stop_reason_.empty()) note += "; " + stop_reason_ + " before bisection ended";
  confirm(best, note);
  if (stopped_) return result();
  return finish(records::TuneStatus::kAnswered, best, note + noise);
}

// Whether `a` is a better answer than `b` by the objective (then the metric, then the order).
bool Search::better_answer(const Candidate& a, const Candidate& b) {
  if (block_.objective == Objective::kSpeed) {
    const double fa = exec_.speed(a.run_id), fb = exec_.speed(b.run_id);
    if (fa != fb) return fa > fb;
  } else {
    const auto ra = precision_rank(exec_.view(a.run_id).config, exec_.fp32_share(a.run_id),
                                   exec_.fp8_share(a.run_id));
    const auto rb = precision_rank(exec_.view(b.run_id).config, exec_.fp32_share(b.run_id),
                                   exec_.fp8_share(b.run_id));
    if (ra != rb) return ra < rb;
  }
  const double sa = spec_.tolerance.shortfall(a.value, a.reference_value);
  const double sb = spec_.tolerance.shortfall(b.value, b.reference_value);
  if (sa != sb) return sa < sb;
  return std::make_pair(a.round, a.seq) < std::make_pair(b.round, b.seq);
}

// A solution's items: each module it keeps in fp32 or out of FP8, and each other key a union
// set.
std::vector<std::string> Search::bisect_items(const Candidate& solution, const RunView& run) {
  std::vector<std::string> items = module_items(run.config);
  auto undo = undo_.find(solution.run_id);
  if (undo != undo_.end()) {
    for (const auto& [item, key_value] : undo->second) items.push_back(item);
  }
  return items;
}

// The change over `run` (a solution) that keeps `kept` of its items and undoes `dropped`.
Overrides Search::probe_change(const RunView& run, const std::vector<std::string>& kept,
                               const std::vector<std::string>& dropped, int64_t solution) {
  Overrides change = module_probe(run.config, kept, dropped);
  auto undo = undo_.find(solution);
  if (undo == undo_.end()) return change;
  for (const auto& [item, key_value] : undo->second) {  // undone: dropped now or before
    const bool keeps = std::find(kept.begin(), kept.end(), item) != kept.end() &&
                       std::find(dropped.begin(), dropped.end(), item) == dropped.end();
    if (!keeps) change.push_back(key_value);
  }
  return change;
}

// 8. Bisection of a solution's items; the smallest solution found (unset: none smaller). Rounds
// of kind bisect, one probe each.
std::optional<Candidate> Search::bisect(const Candidate& solution,
                                        std::vector<std::string>& kept) {
  const RunView run = exec_.view(solution.run_id);
  const std::vector<std::string> items = bisect_items(solution, run);
  if (items.size() < 2) return std::nullopt;
  std::vector<std::pair<std::vector<std::string>, bool>> probes;
  std::optional<Candidate> best;
  while (auto chunk = next_bisect_probe(items, probes, kept)) {
    ++round_;
    const std::string dropped = flow_yaml(nlohmann::json(*chunk));
    const Overrides change = probe_change(run, kept, *chunk, solution.run_id);
    exec_.record_round({search_.id, round_, records::TuneRoundKind::kBisect, solution.run_id,
                        solution.fork_epoch, std::nullopt,
                        "bisection of " + flow_yaml(nlohmann::json(kept))});
    TuneMove m{bisect_move(*chunk, module_items(run.config)), change,
               "bisection: does the solution stay within tolerance without " + dropped + "?",
               std::nullopt, ""};
    std::vector<Candidate> probe = {record_candidate(run, solution.fork_epoch, m, 0)};
    if (!affordable(last_ - probe[0].fork_epoch, "a bisection probe")) break;
    if (!train_to({probe[0].run_id}, last_)) break;
    count_trained(probe[0].run_id, last_);
    judge_final(probe[0]);
    const bool within = probe[0].outcome == Outcome::kWithin;
    probes.emplace_back(*chunk, within);
    if (within) best = probe[0];
  }
  return best;
}

// 9. tune.confirm: the answer trained from scratch (a round of kind confirm), its metric beside
// the forked one in the note; a warning when it ends outside tolerance.
void Search::confirm(const Candidate& answer, std::string& note) {
  const RunView run = exec_.view(answer.run_id);
  if (!block_.confirm || run.parent == 0) return;
  ++round_;
  exec_.record_round({search_.id, round_, records::TuneRoundKind::kConfirm, answer.run_id, -1,
                      std::nullopt, "the answer trained from scratch, not as a fork"});
  TuneMove m{TuneMoveKind::kConfirm,
             {},
             "tune.confirm: the answer's setting from scratch",
             std::nullopt,
             ""};
  const int64_t id = exec_.fresh_run(run.config, "tune confirm: " + run.name + " from scratch");
  Candidate c;
  c.search_id = search_.id;
  c.round = round_;
  c.move = m.move;
  c.change_json = "{}";
  c.reason = m.reason;
  c.run_id = id;
  exec_.record_candidate(c);
  if (!affordable(spec_.epochs, "the confirmation")) {
    note += "; not confirmed from scratch (" + stop_reason_ + ")";
    return;
  }
  if (!train_to({id}, last_)) return;
  count_trained(id, last_);
  judge_final(c);
  note += "; from scratch " + significant(c.value, 4) + " (" + to_string(c.outcome) + ")";
  if (c.outcome != Outcome::kWithin) {
    log::warn("tune: the answer trained from scratch ends " + to_string(c.outcome) + " (" +
              spec_.metric + " " + significant(c.value, 4) + " against the reference's " +
              significant(ref_value(last_), 4) + "): the forked path's result depends on its path");
  }
}

SearchResult Search::finish(records::TuneStatus status, const std::optional<Candidate>& answer,
                            const std::string& note) {
  search_.status = status;
  search_.note = note;
  search_.epochs_spent = spent_;
  search_.grid_epochs = grid_epochs(tried_, spec_.epochs);
  search_.reference_value = ref_value(last_);
  if (answer) {
    const RunView run = exec_.view(answer->run_id);
    if (status == records::TuneStatus::kAnswered && block_.objective == Objective::kPrecision) {
      const double share = exec_.fp32_share(run.id);
      if (!std::isnan(share)) {
        search_.note += "; " + significant(share * 100, 3) + " %" +
                        " of the forward multiply-accumulates in fp32";
      }
    }
    search_.answer_run_id = run.id;
    search_.answer_value = answer->value;
    search_.answer_yaml = changed_yaml(run.config, spec_.base, all_keys(spec_.base));
  }
  exec_.finish_search(search_);
  return result();
}

bool Search::affordable(int epochs, const std::string& what) {
  if (spent_ + epochs <= spec_.budget) return true;
  stop_reason_ = "the budget of " + std::to_string(spec_.budget) + " epochs is spent (" +
                 std::to_string(spent_) + " spent; " + what + " needs up to " +
                 std::to_string(epochs) + " more)";
  return false;
}

}  // namespace

SearchResult run_search(TuneExecutor& executor, const SearchSpec& spec, int64_t sweep_id) {
  return Search(executor, spec).run(sweep_id);
}

}  // namespace amptune::app
