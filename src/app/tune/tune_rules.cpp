// app/tune/tune_rules.h: the rules of amptune tune as pure functions.
#include "app/tune/tune_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "amp/policy.h"
#include "core/settings.h"

namespace amptune::app {

using records::AdviceRule;

double Tolerance::limit(double reference) const {
  const double margin = abs > 0 ? abs : rel * std::fabs(reference);
  return higher_is_better ? reference - margin : reference + margin;
}

bool Tolerance::within(double value, double reference) const {
  if (!std::isfinite(value) || !std::isfinite(reference)) return false;
  return higher_is_better ? value >= limit(reference) : value <= limit(reference);
}

double Tolerance::shortfall(double value, double reference) const {
  if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
  return higher_is_better ? reference - value : value - reference;
}

Config with(const Config& base, const Overrides& overrides) {
  Config config = base;
  for (const auto& [key, value] : overrides) config.set(key, value);
  return config;
}

std::vector<std::string> distinct(const std::vector<std::string>& names) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& name : names) {
    if (seen.insert(name).second) out.push_back(name);
  }
  return out;
}

std::optional<int> exit_epoch(const std::map<int, double>& values,
                              const std::map<int, double>& reference, int last,
                              const Tolerance& tolerance) {
  for (int epoch = 0; epoch <= last; ++epoch) {
    const auto value = values.find(epoch);
    if (value == values.end()) return epoch;
    const auto ref = reference.find(epoch);
    if (ref != reference.end() && !tolerance.within(value->second, ref->second)) return epoch;
  }
  return std::nullopt;
}

Outcome judge(const RunCurve& curve, int last, double reference, const Tolerance& tolerance) {
  if (curve.status == records::RunStatus::kFailed) return Outcome::kFailed;
  if (curve.status == records::RunStatus::kPruned) return Outcome::kPruned;
  const auto value = curve.values.find(last);
  if (curve.status == records::RunStatus::kDiverged || curve.ends_non_finite ||
      value == curve.values.end() || !std::isfinite(value->second)) {
    return Outcome::kDiverged;
  }
  return tolerance.within(value->second, reference) ? Outcome::kWithin : Outcome::kOutside;
}

Progress progress_of(const RunCurve& curve, const std::map<int, double>& reference, int last,
                     const Tolerance& tolerance) {
  Progress p;
  p.shortfall = std::numeric_limits<double>::infinity();
  for (int epoch = 0; epoch <= last; ++epoch) {
    const auto value = curve.values.find(epoch);
    if (value == curve.values.end() || !std::isfinite(value->second)) break;
    const auto ref = reference.find(epoch);
    p.reached = epoch + 1;
    p.shortfall = ref == reference.end() ? std::numeric_limits<double>::infinity()
                                         : tolerance.shortfall(value->second, ref->second);
  }
  return p;
}

bool further(const Progress& a, const Progress& b) {
  if (a.reached != b.reached) return a.reached > b.reached;
  return a.shortfall < b.shortfall;
}

namespace {

std::string parent_of(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

// What the moves need to know of a setting, with apex's meaning of its amp keys.
struct Setting {
  amp::Policy policy;
  AmpSettings amp;
  std::vector<std::string> modules, casts;
  bool static_scale() const { return policy.low_precision() && !policy.dynamic_scale; }
  bool batchnorm_fp32() const { return !policy.cast_model || policy.keep_batchnorm_fp32; }
};

Setting setting_of(const Config& config) {
  Setting s;
  s.amp = Settings::from(config).amp;
  s.policy = amp::apex_properties(s.amp);
  s.modules = config.get_string_list("amp.fp32_modules");
  s.casts = config.get_string_list("casts.int32");
  return s;
}

std::string scale_text(const Setting& s) {
  return s.amp.loss_scale.word == LossScaleWord::kAuto
             ? "auto (static " + s.policy.loss_scale_text() + ")"
             : s.policy.loss_scale_text();
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// Moves, each change once (the first), the allowed ones only.
class MoveList {
 public:
  explicit MoveList(const std::vector<TuneMoveKind>& allowed) : allowed_(allowed) {}
  void add(TuneMove move) {
    if (std::find(allowed_.begin(), allowed_.end(), move.move) == allowed_.end()) return;
    nlohmann::json key = nlohmann::json::array();
    for (const auto& [k, v] : move.change) key.push_back({k, v});
    if (changes_.insert(key.dump()).second) moves_.push_back(std::move(move));
  }
  std::vector<TuneMove> take() { return std::move(moves_); }

 private:
  const std::vector<TuneMoveKind>& allowed_;
  std::set<std::string> changes_;  // dumps of the changes listed
  std::vector<TuneMove> moves_;
};

// The move an advice row maps to; unset when none does over `s`.
std::optional<TuneMove> advice_move(const records::DiagnosisAdvice& a, const Setting& s) {
  TuneMove m;
  m.advice_rule = a.rule;
  m.advice_module = a.module;
  const std::string rule = records::to_string(a.rule);
  switch (a.rule) {
    case AdviceRule::kActivationOverflow:
    case AdviceRule::kFirstDeparture: {
      if (a.module.empty()) return std::nullopt;
      std::string module = a.module;
      const std::string parent = parent_of(module);
      const bool overflow = a.rule == AdviceRule::kActivationOverflow;
      if (overflow && s.policy.cast_model && !parent.empty()) module = parent;
      if (contains(s.modules, module)) return std::nullopt;
      std::vector<std::string> list = s.modules;
      list.push_back(module);
      m.move = TuneMoveKind::kFp32Modules;
      m.change = {{"amp.fp32_modules", list}};
      m.reason = "the diagnosis's " + rule + " names " + a.module + ": keep " + module + " in fp32";
      return m;
    }
    case AdviceRule::kGradientUnderflow:
    case AdviceRule::kGradientOverflow:
      if (!s.static_scale()) return std::nullopt;
      m.move = TuneMoveKind::kLossScale;
      m.change = {{"amp.loss_scale", to_string(LossScaleWord::kDynamic)}};
      m.reason = "the diagnosis's " + rule + " (" + a.module + ") at the static scale " +
                 scale_text(s) + ": scale dynamically";
      return m;
    case AdviceRule::kBatchnormLowPrecision:
      if (s.batchnorm_fp32()) return std::nullopt;
      m.move = TuneMoveKind::kKeepBatchnormFp32;
      m.change = {{"amp.keep_batchnorm_fp32", to_string(AutoBool::kTrue)}};
      m.reason = "the diagnosis finds BatchNorm " + a.module + " departing in low precision";
      return m;
    case AdviceRule::kCastPoint: {
      if (!contains(s.casts, a.module)) return std::nullopt;
      auto kept = s.casts;
      kept.erase(std::remove(kept.begin(), kept.end(), a.module), kept.end());
      m.move = TuneMoveKind::kCasts;
      m.change = {{"casts.int32", kept}};
      m.reason = "the diagnosis finds the int32 cast of " + a.module + " truncating its values";
      return m;
    }
  }
  return std::nullopt;
}

// The modules the overflow advice names (each kept in fp32 by its own move) kept together: one
// move when there are two or more.
std::optional<TuneMove> overflows_together(const std::vector<TuneMove>& advised,
                                           const Setting& s) {
  std::vector<std::string> list = s.modules;
  std::vector<std::string> named;
  for (const TuneMove& m : advised) {
    if (m.move != TuneMoveKind::kFp32Modules || m.advice_rule != AdviceRule::kActivationOverflow) {
      continue;
    }
    const std::string module = m.change.front().second.back().get<std::string>();
    if (contains(list, module)) continue;
    list.push_back(module);
    named.push_back(module);
  }
  if (named.size() < 2) return std::nullopt;
  TuneMove m;
  m.move = TuneMoveKind::kFp32Modules;
  m.change = {{"amp.fp32_modules", list}};
  m.reason = "the diagnosis finds " + std::to_string(named.size()) +
             " modules overflowing with finite input: keep " + flow_yaml(named) +
             " in fp32 together";
  m.advice_rule = AdviceRule::kActivationOverflow;
  m.advice_module = named.front();
  for (size_t i = 1; i < named.size(); ++i) m.advice_module += "," + named[i];
  return m;
}

// The learning-rate move: each decay after `fork_epoch` one epoch later; unset when none moves.
std::optional<TuneMove> lr_move(const Config& current, int fork_epoch) {
  const int64_t epochs = current.get_int("schedule.epochs");
  auto decay = current.at("schedule.lr_dec_epoch").get<std::vector<int64_t>>();
  bool moved = false;
  for (auto& e : decay) {
    if (e > fork_epoch && e + 1 < epochs) {
      ++e;
      moved = true;
    }
  }
  if (!moved) return std::nullopt;
  return TuneMove{TuneMoveKind::kLrDecEpoch,
                  {{"schedule.lr_dec_epoch", decay}},
                  "move order: each learning-rate decay after epoch " + std::to_string(fork_epoch) +
                      " one epoch later",
                  std::nullopt,
                  ""};
}

// The opt-level move: one level toward fp32 (amp::toward_fp32), never to O0, the reference's
// (a search for a lower precision that ends at fp32 has found nothing).
std::optional<TuneMove> level_move(const Setting& s) {
  const OptLevel level = s.policy.opt_level;
  const std::optional<OptLevel> to = amp::toward_fp32(level);
  if (!to || *to == OptLevel::kO0) return std::nullopt;
  TuneMove m{TuneMoveKind::kOptLevel, {}, "", std::nullopt, ""};
  for (const auto& [key, value] : amp::opt_level_change(s.amp, *to)) {
    m.change.emplace_back(key, value);
  }
  m.reason = "move order: " + to_string(level) + " -> " + to_string(*to) + " (" +
             amp::fp32_summary(*to) + ")";
  return m;
}

}  // namespace

std::vector<TuneMove> candidate_moves(const Config& current,
                                      const std::vector<records::DiagnosisAdvice>& advice,
                                      const std::vector<TuneMoveKind>& allowed, int fork_epoch,
                                      bool lr_shifted) {
  const Setting s = setting_of(current);
  MoveList out(allowed);
  std::vector<TuneMove> advised;
  for (const records::DiagnosisAdvice& a : advice) {
    if (auto m = advice_move(a, s)) advised.push_back(*m);
  }
  // Every overflowing module together first: when each alone still diverges (the others
  // overflow), it is the candidate that gets furthest, and ties go to the earlier.
  if (auto m = overflows_together(advised, s)) out.add(*m);
  for (const TuneMove& m : advised) out.add(m);
  // The move order, cheapest (least fp32 work added) first.
  if (s.static_scale()) {
    out.add({TuneMoveKind::kLossScale,
             {{"amp.loss_scale", to_string(LossScaleWord::kDynamic)}},
             "move order: the static loss scale " + scale_text(s) + " -> dynamic",
             std::nullopt,
             ""});
  }
  if (!s.casts.empty()) {
    out.add({TuneMoveKind::kCasts,
             {{"casts.int32", nlohmann::json::array()}},
             "move order: no int32 casts in the data path",
             std::nullopt,
             ""});
  }
  if (s.policy.cast_model && !s.batchnorm_fp32()) {
    out.add({TuneMoveKind::kKeepBatchnormFp32,
             {{"amp.keep_batchnorm_fp32", to_string(AutoBool::kTrue)}},
             "move order: BatchNorm in fp32",
             std::nullopt,
             ""});
  }
  if (!lr_shifted) {
    if (auto m = lr_move(current, fork_epoch)) out.add(*m);
  }
  if (auto m = level_move(s)) out.add(*m);
  return out.take();
}

Overrides union_change(const Config& current, const std::vector<TuneMove>& moves) {
  std::vector<std::string> modules = current.get_string_list("amp.fp32_modules");
  std::vector<std::string> casts = current.get_string_list("casts.int32");
  const std::vector<std::string> modules_before = modules, casts_before = casts;
  Overrides out;
  std::set<std::string> keys;
  for (const TuneMove& m : moves) {
    for (const auto& [key, value] : m.change) {
      if (key == "amp.fp32_modules") {
        for (const auto& module : value.get<std::vector<std::string>>()) {
          if (!contains(modules, module)) modules.push_back(module);
        }
      } else if (key == "casts.int32") {
        const auto kept = value.get<std::vector<std::string>>();
        casts.erase(std::remove_if(casts.begin(), casts.end(),
                                   [&](const std::string& c) { return !contains(kept, c); }),
                    casts.end());
      } else if (keys.insert(key).second) {
        out.emplace_back(key, value);
      }
    }
  }
  if (modules != modules_before) out.emplace_back("amp.fp32_modules", modules);
  if (casts != casts_before) out.emplace_back("casts.int32", casts);
  return out;
}

std::vector<int> tune_rungs(int fork_epoch, int last_epoch, int eta, int min_epochs) {
  std::vector<int> rungs;
  for (int64_t step = min_epochs; fork_epoch + step < last_epoch; step *= eta) {
    rungs.push_back(static_cast<int>(fork_epoch + step));
  }
  rungs.push_back(last_epoch);
  return rungs;
}

std::optional<std::vector<std::string>> next_bisect_probe(
    const std::vector<std::string>& modules,
    const std::vector<std::pair<std::vector<std::string>, bool>>& probes,
    std::vector<std::string>& kept) {
  // Each module once: a list that repeats one (a database of an earlier release took it) would
  // otherwise cost a probe run per copy.
  kept = distinct(modules);
  const std::vector<std::string> all = kept;
  // The chunks still to try, the next one first: halves of the list to begin with.
  std::vector<std::vector<std::string>> queue;
  auto halves = [](const std::vector<std::string>& chunk) {
    const size_t half = (chunk.size() + 1) / 2;
    return std::make_pair(std::vector<std::string>(chunk.begin(), chunk.begin() + half),
                          std::vector<std::string>(chunk.begin() + half, chunk.end()));
  };
  if (all.size() >= 2) {
    auto [a, b] = halves(all);
    queue = {b, a};  // back = next
  }
  for (const auto& [dropped, within] : probes) {
    if (queue.empty() || queue.back() != dropped) break;  // a history of another list
    queue.pop_back();
    if (within) {
      for (const auto& m : dropped)
        kept.erase(std::remove(kept.begin(), kept.end(), m), kept.end());
    } else if (dropped.size() > 1) {
      auto [a, b] = halves(dropped);
      queue.push_back(b);
      queue.push_back(a);
    }
  }
  if (queue.empty()) return std::nullopt;
  return queue.back();
}

std::vector<double> precision_rank(const Config& config, double fp32_share) {
  const Setting s = setting_of(config);
  return {std::isnan(fp32_share) ? 1.0 : fp32_share,
          static_cast<double>(amp::fp32_order(s.policy.opt_level)),
          static_cast<double>(distinct(s.modules).size()),
          s.policy.cast_model && s.batchnorm_fp32() ? 1.0 : 0.0};
}

double seed_noise(const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  int finite = 0;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    ++finite;
  }
  return finite < 2 ? 0 : hi - lo;
}

std::string flow_yaml(const nlohmann::json& value) {
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + flow_yaml(value[i]);
    return out + "]";
  }
  if (value.is_string()) {
    static const std::regex kPlain("[A-Za-z_][A-Za-z0-9_.*/-]*");
    const std::string s = value.get<std::string>();
    static const std::set<std::string> kWords = {"true", "false", "null",  "yes",  "no",  "on",
                                                 "off",  "True",  "False", "Null", "Yes", "No"};
    if (std::regex_match(s, kPlain) && !kWords.count(s)) return s;
    return nlohmann::json(s).dump();
  }
  return value.dump();
}

std::string moves_yaml(const std::vector<TuneMoveKind>& moves) {
  nlohmann::json names = nlohmann::json::array();
  for (const TuneMoveKind m : moves) names.push_back(to_string(m));
  return flow_yaml(names);
}

std::string changed_yaml(const Config& config, const Config& base,
                         const std::vector<std::string>& keys) {
  std::string out;
  std::set<std::string> seen;
  for (const std::string& key : keys) {
    if (!seen.insert(key).second || config.at(key) == base.at(key)) continue;
    out += key + ": " + flow_yaml(config.at(key)) + "\n";
  }
  return out;
}

int grid_epochs(const std::vector<records::TuneCandidateRow>& candidates, int epochs) {
  std::map<TuneMoveKind, std::set<std::string>> tried;
  std::set<std::string> modules;  // every module a fp32_modules move named
  for (const auto& c : candidates) {
    if (!c.move) continue;
    tried[*c.move].insert(c.change_json);
    if (c.move != TuneMoveKind::kFp32Modules) continue;
    const nlohmann::json change = nlohmann::json::parse(c.change_json, nullptr, false);
    const auto list = change.is_object() ? change.find("amp.fp32_modules") : change.end();
    if (list == change.end() || !list->is_array()) continue;
    for (const auto& m : *list) {
      if (m.is_string()) modules.insert(m.get<std::string>());
    }
  }
  int64_t cells = 1;
  for (const auto& [move, changes] : tried) {
    // fp32_modules: every subset of the modules named (the grid a user would run by hand);
    // another move: each distinct change, or none.
    const int64_t axis = move == TuneMoveKind::kFp32Modules
                             ? (int64_t{1} << std::min<size_t>(modules.size(), 30))
                             : 1 + static_cast<int64_t>(changes.size());
    cells = std::min<int64_t>(cells * axis, int64_t{1} << 31);
  }
  const int64_t total = (cells + 1) * epochs;  // the grid, plus the reference
  return static_cast<int>(std::min<int64_t>(total, std::numeric_limits<int>::max()));
}

}  // namespace amptune::app
