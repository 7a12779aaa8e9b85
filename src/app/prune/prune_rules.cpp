#include "app/prune/prune_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/error.h"

namespace amptune::app {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Basis = PruneDecision::Basis;

// A value that takes part in a ranking; NaN and infinities rank below every finite value (an
// accuracy of +inf or a loss of -inf is a broken run, not a winner).
bool ranked(double v) { return std::isfinite(v); }

// a strictly better than b (neither worse nor tied).
bool better(double a, double b, bool higher_is_better) {
  if (!ranked(a)) return false;
  if (!ranked(b)) return true;
  return higher_is_better ? a > b : a < b;
}

// Best first; unranked values last; ties by id, so the order is the same in every process.
void sort_best_first(std::vector<PruneComparand>& cells, bool higher_is_better) {
  std::sort(cells.begin(), cells.end(), [&](const PruneComparand& a, const PruneComparand& b) {
    if (better(a.value, b.value, higher_is_better)) return true;
    if (better(b.value, a.value, higher_is_better)) return false;
    return a.id < b.id;
  });
}

std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string epochs_text(int n) { return std::to_string(n) + (n == 1 ? " epoch" : " epochs"); }

std::string metric_name(const PruneSettings& s) { return s.metric.empty() ? "value" : s.metric; }

// The rung whose last epoch is `epoch`, if one is.
std::optional<int> rung_of(const PruneSettings& s, int epoch) {
  const int64_t trained = int64_t{epoch} + 1;
  int64_t r = s.grace_epochs;
  for (int k = 0; r <= trained; ++k, r *= s.eta) {
    if (r == trained) return k;
  }
  return std::nullopt;
}

void check_ids(const PruneTable& table) {
  std::set<int64_t> seen;
  for (const PruneCell& cell : table) {
    if (!seen.insert(cell.id).second) {
      throw std::invalid_argument("prune: the table holds cell " + std::to_string(cell.id) +
                                  " twice");
    }
  }
}

// The other cells' values at `epoch`, best first.
std::vector<PruneComparand> others_at(const PruneTable& table, int64_t id, int epoch,
                                      bool higher_is_better) {
  std::vector<PruneComparand> out;
  for (const PruneCell& cell : table) {
    if (cell.id == id) continue;
    const auto it = cell.values.find(epoch);
    if (it != cell.values.end()) out.push_back({cell.id, it->second});
  }
  sort_best_first(out, higher_is_better);
  return out;
}

// numpy.percentile(x, 50) (linear interpolation) of the values, with unranked values at the worst
// end; NaN when the median falls on or next to one of them.
double median_of(const std::vector<PruneComparand>& best_first) {
  const size_t n = best_first.size();
  if (n % 2 == 1) {
    const double m = best_first[n / 2].value;
    return ranked(m) ? m : kNaN;
  }
  const double x = best_first[n / 2 - 1].value, y = best_first[n / 2].value;
  if (!ranked(x) || !ranked(y)) return kNaN;
  // numpy's _lerp at t = 0.5 from the lower value a to the upper b: b - (b - a) * 0.5, bit for
  // bit, so a cell that ties the median is judged as Optuna judges it.
  const double a = std::min(x, y), b = std::max(x, y);
  return b - (b - a) * 0.5;
}

void decide_asha(const PruneTable& table, const PruneSettings& s, int rung, double own,
                 PruneDecision& d) {
  d.rung = rung;
  d.others = others_at(table, d.cell_id, d.epoch, s.higher_is_better);
  const std::string at = metric_name(s) + " " + num(own) + " after " + epochs_text(d.epoch + 1) +
                         " (rung " + std::to_string(d.rung) + ")";
  if (!ranked(own)) {
    d.basis = Basis::kNotFinite;
    d.stop = true;
    d.reason = at + ": a NaN or infinite value ranks worst";
    return;
  }
  // With n cells at the rung (this one included) the best n / eta continue (ASHA's promotion
  // rule), ties with the last of them too. While `arriving` cells (running or pending, below the
  // rung) may still reach it, a cell continues at once only when it stays within the top 1/eta
  // however they do: rank + arriving <= (n + arriving) / eta; otherwise it waits (stops) and is
  // promoted when that holds or none can arrive any more. So a decision to continue is never
  // wrong against the final database, whatever order the cells come in. Once none can arrive,
  // at least the best continues. Optuna (wait_for_arrivals false) never resumes a stopped trial
  // and lets the best so far continue: max(1, n / eta) at every arrival.
  std::vector<PruneComparand> rung_cells = d.others;
  rung_cells.push_back({d.cell_id, own});
  sort_best_first(rung_cells, s.higher_is_better);
  const int n = static_cast<int>(rung_cells.size());
  int arriving = 0;
  for (const PruneCell& cell : table) {
    if (cell.id == d.cell_id || cell.status != PruneCell::Status::kRunning) continue;
    arriving += cell.values.empty() || cell.values.rbegin()->first < d.epoch;
  }
  if (!s.wait_for_arrivals) arriving = 0;
  d.basis = Basis::kCompared;
  d.rank = 1;
  for (const PruneComparand& c : d.others) d.rank += better(c.value, own, s.higher_is_better);
  const std::string of = "the top 1/" + std::to_string(s.eta) + " of " + std::to_string(n) +
                         (n == 1 ? " cell" : " cells") + " there";
  if (arriving > 0) {
    // The best (n + arriving) / eta at the end; `arriving` of them may come: the cell must be
    // within the first (n + arriving) / eta - arriving of those here.
    d.keep = std::max(0, (n + arriving) / s.eta - arriving);
    if (d.keep == 0 || better(rung_cells[d.keep - 1].value, own, s.higher_is_better)) {
      d.stop = true;
      d.threshold = d.keep == 0 || !ranked(rung_cells[d.keep - 1].value)
                        ? kNaN
                        : rung_cells[d.keep - 1].value;
      d.reason = at + " waits: rank " + std::to_string(d.rank) + " of " + std::to_string(n) +
                 " there with " + std::to_string(arriving) + (arriving == 1 ? " cell" : " cells") +
                 " still to come; it goes on once it is sure to stay in the top 1/" +
                 std::to_string(s.eta);
      return;
    }
  } else {
    d.keep = std::max(1, n / s.eta);
  }
  const double last_kept = rung_cells[d.keep - 1].value;
  d.threshold = ranked(last_kept) ? last_kept : kNaN;
  // Ties with the last kept cell continue too (Optuna compares with >= / <=).
  d.stop = better(last_kept, own, s.higher_is_better);
  const std::string how =
      arriving > 0
          ? "the best " + std::to_string(d.keep) + " stay in the top 1/" + std::to_string(s.eta) +
                " whatever the " + std::to_string(arriving) + " still to come do"
      : n >= s.eta          ? "the best " + std::to_string(d.keep) + " continue"
      : s.wait_for_arrivals ? "fewer than eta there and none to come, the best continues"
                            : "fewer than eta there, only the best continues";
  const std::string needs = std::string(s.higher_is_better ? ">= " : "<= ") +
                            (ranked(last_kept) ? num(last_kept) : "NaN (ranks worst)");
  d.reason = at + (d.stop ? " is not in " : " is in ") + of + ": rank " + std::to_string(d.rank) +
             ", " + how + ", needs " + needs;
}

void decide_median(const PruneTable& table, const PruneSettings& s, const PruneCell& cell,
                   PruneDecision& d) {
  d.others = others_at(table, d.cell_id, d.epoch, s.higher_is_better);
  const std::string at = " at epoch " + std::to_string(d.epoch);
  // The cell's best value so far, as Optuna's MedianPruner takes it (nanmax / nanmin over the
  // reported steps): a dip does not stop a cell that was good before.
  double best = kNaN;
  for (auto it = cell.values.begin(); it != cell.values.end() && it->first <= d.epoch; ++it) {
    if (better(it->second, best, s.higher_is_better)) best = it->second;
  }
  // A cell with no finite value stops whatever the others, as it does at an ASHA rung (Optuna
  // waits for n_startup_trials completed trials first).
  if (!ranked(best)) {
    d.basis = Basis::kNotFinite;
    d.stop = true;
    d.reason = metric_name(s) + " has no finite value up to epoch " + std::to_string(d.epoch) +
               ": a NaN or infinite value ranks worst";
    return;
  }
  const int n = static_cast<int>(d.others.size());
  if (n < s.min_cells) {
    d.basis = Basis::kTooFewCells;
    d.reason = "only " + std::to_string(n) + " other " + (n == 1 ? "cell has " : "cells have ") +
               metric_name(s) + at + ", the median rule needs min_cells " +
               std::to_string(s.min_cells);
    return;
  }
  d.value = best;
  d.basis = Basis::kCompared;
  d.threshold = median_of(d.others);
  // Strictly worse than the median stops; a tie continues (Optuna: best < p when maximizing).
  d.stop = ranked(d.threshold) && better(d.threshold, best, s.higher_is_better);
  const std::string side = s.higher_is_better ? "below" : "above";
  d.reason = "best " + metric_name(s) + " " + num(best) + " up to epoch " +
             std::to_string(d.epoch) + (d.stop ? " is " : " is not ") + side + " the median " +
             (ranked(d.threshold) ? num(d.threshold) : "NaN (ranks worst)") + " of " +
             std::to_string(n) + " other " + (n == 1 ? "cell" : "cells") + at;
}

PruneDecision decide(const PruneTable& table, const PruneSettings& s, const PruneCell& cell,
                     int epoch) {
  PruneDecision d;
  d.cell_id = cell.id;
  d.epoch = epoch;
  d.rule = s.rule;
  d.value = kNaN;
  d.threshold = kNaN;
  const auto own = cell.values.find(epoch);
  if (own != cell.values.end()) d.value = own->second;
  if (s.rule == PruneRule::kNone) {
    d.basis = Basis::kRuleNone;
    d.reason = "pruning is off (rule none)";
    return d;
  }
  if (epoch < 0) {
    d.basis = Basis::kNoValue;
    d.reason = "no epoch recorded";
    return d;
  }
  if (epoch + 1 < s.grace_epochs) {
    d.basis = Basis::kBeforeGrace;
    d.reason = epochs_text(epoch + 1) + " trained: no decision before grace_epochs " +
               std::to_string(s.grace_epochs);
    return d;
  }
  const std::optional<int> rung = rung_of(s, epoch);
  if (s.rule == PruneRule::kAsha && !rung) {
    d.basis = Basis::kBetweenRungs;
    int64_t next = s.grace_epochs;
    while (next <= epoch + 1) next *= s.eta;
    d.reason = "epoch " + std::to_string(epoch) + " (" + epochs_text(epoch + 1) +
               " trained) ends no rung; the next rung stands after " + std::to_string(next) +
               " epochs";
    return d;
  }
  if (own == cell.values.end()) {
    d.basis = Basis::kNoValue;
    d.reason = "no " + metric_name(s) + " value at epoch " + std::to_string(epoch);
    return d;
  }
  if (s.rule == PruneRule::kAsha) {
    decide_asha(table, s, *rung, d.value, d);
  } else {
    decide_median(table, s, cell, d);
  }
  return d;
}

}  // namespace

void validate(const PruneSettings& s) {
  auto check = [](const char* key, int value, int min) {
    if (value < min) {
      throw ConfigError(std::string("prune.") + key + " must be >= " + std::to_string(min) +
                        ", got " + std::to_string(value));
    }
  };
  check("grace_epochs", s.grace_epochs, 1);
  check("eta", s.eta, 2);
  check("min_cells", s.min_cells, 1);
}

PruneDecision decide_prune(const PruneTable& table, const PruneSettings& settings, int64_t cell_id,
                           int epoch) {
  validate(settings);
  if (epoch < 0) {
    throw std::invalid_argument("prune: epoch " + std::to_string(epoch) + " is negative");
  }
  check_ids(table);
  for (const PruneCell& cell : table) {
    if (cell.id == cell_id) return decide(table, settings, cell, epoch);
  }
  throw std::invalid_argument("prune: no cell " + std::to_string(cell_id) + " in the table");
}

std::vector<PruneDecision> promotable_cells(const PruneTable& table,
                                            const PruneSettings& settings) {
  validate(settings);
  check_ids(table);
  // Each pruned cell is judged at its last rung (asha) or epoch, lowest first: a cell promoted
  // at a lower rung will reach the higher ones, so it counts as still to come there.
  struct Waiting {
    size_t index;
    int at;
  };
  std::vector<Waiting> waiting;
  for (size_t i = 0; i < table.size(); ++i) {
    const PruneCell& cell = table[i];
    if (cell.status != PruneCell::Status::kPruned) continue;
    const int last = cell.values.empty() ? -1 : cell.values.rbegin()->first;
    int at = last;
    if (settings.rule == PruneRule::kAsha && last >= 0) {
      const std::vector<int> rungs = rung_epochs(settings, last + 1);
      if (!rungs.empty()) at = rungs.back();
    }
    waiting.push_back({i, at});
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const Waiting& a, const Waiting& b) { return a.at < b.at; });
  PruneTable now = table;
  std::vector<std::pair<size_t, PruneDecision>> promoted;
  for (const Waiting& w : waiting) {
    PruneDecision d = decide(now, settings, now[w.index], w.at);
    if (d.stop) continue;
    now[w.index].status = PruneCell::Status::kRunning;
    promoted.emplace_back(w.index, std::move(d));
  }
  std::sort(promoted.begin(), promoted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PruneDecision> out;
  for (auto& [index, d] : promoted) out.push_back(std::move(d));
  return out;
}

std::vector<int> rung_epochs(const PruneSettings& settings, int epochs) {
  validate(settings);
  std::vector<int> out;
  for (int64_t r = settings.grace_epochs; r <= epochs; r *= settings.eta) {
    out.push_back(static_cast<int>(r - 1));
  }
  return out;
}

}  // namespace amptune::app
