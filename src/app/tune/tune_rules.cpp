// app/tune/tune_rules.h: the rules of amptune tune as pure functions.
#include "app/tune/tune_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "amp/policy.h"
#include "core/settings.h"
#include "core/words.h"

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
  // amp.fp8 as the recipe reads it (docs/TUNE.md "FP8").
  const amp::Fp8Policy& fp8() const { return policy.fp8; }
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

// The FP8 recipe moves over `s`, each unset when it changes nothing: current scaling, one more
// power of two of margin, a history 16 times shorter (at least 1).
std::optional<TuneMove> fp8_recipe_move(const Setting& s) {
  if (!s.fp8().enabled || !s.fp8().delayed) return std::nullopt;
  return TuneMove{TuneMoveKind::kFp8Recipe, {{"amp.fp8.recipe", to_string(Fp8Recipe::kCurrent)}},
                  "FP8 scaling from each tensor's own amax (delayed -> current)", std::nullopt, ""};
}
std::optional<TuneMove> fp8_margin_move(const Setting& s) {
  if (!s.fp8().enabled) return std::nullopt;
  return TuneMove{TuneMoveKind::kFp8Margin,
                  {{"amp.fp8.margin", s.fp8().margin + 1}},
                  "FP8 margin " + std::to_string(s.fp8().margin) + " -> " +
                      std::to_string(s.fp8().margin + 1) + " (twice the headroom)",
                  std::nullopt,
                  ""};
}
std::optional<TuneMove> fp8_history_move(const Setting& s) {
  if (!s.fp8().enabled || !s.fp8().delayed || s.fp8().amax_history_len <= 1) return std::nullopt;
  const int64_t shorter = std::max<int64_t>(1, s.fp8().amax_history_len / 16);
  return TuneMove{TuneMoveKind::kFp8History,
                  {{"amp.fp8.amax_history_len", shorter}},
                  "FP8 amax history " + std::to_string(s.fp8().amax_history_len) + " -> " +
                      std::to_string(shorter) + " steps",
                  std::nullopt,
                  ""};
}

// The move of an FP8 advice row (docs/AMP.md "FP8 advice rules"); unset when it changes nothing.
std::optional<TuneMove> fp8_advice_move(const records::DiagnosisAdvice& a, const Setting& s) {
  std::optional<TuneMove> m;
  const std::string why = "the diagnosis's " + records::to_string(a.rule) + " (" + a.module + ")";
  switch (a.rule) {
    case AdviceRule::kFp8KeepOut: {
      if (!s.fp8().enabled || a.module.empty() || contains(s.fp8().skip_modules, a.module)) break;
      std::vector<std::string> list = s.fp8().skip_modules;
      list.push_back(a.module);
      m = TuneMove{TuneMoveKind::kFp8SkipModules, {{"amp.fp8.skip_modules", list}},
                   why + ": keep " + a.module + " out of FP8", std::nullopt, ""};
      break;
    }
    case AdviceRule::kFp8CurrentScaling: m = fp8_recipe_move(s); break;
    case AdviceRule::kFp8RaiseMargin: m = fp8_margin_move(s); break;
    case AdviceRule::kFp8ShortenHistory: m = fp8_history_move(s); break;
    default: break;
  }
  if (!m) return std::nullopt;
  if (a.rule != AdviceRule::kFp8KeepOut) m->reason = why + ": " + m->reason;
  m->advice_rule = a.rule;
  m->advice_module = a.module;
  return m;
}

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
    case AdviceRule::kFp8KeepOut:
    case AdviceRule::kFp8CurrentScaling:
    case AdviceRule::kFp8RaiseMargin:
    case AdviceRule::kFp8ShortenHistory:
      return fp8_advice_move(a, s);
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
  // FP8's recipe keys (they add no fp32 work either).
  for (auto move : {fp8_recipe_move(s), fp8_margin_move(s), fp8_history_move(s)}) {
    if (move) {
      move->reason = "move order: " + move->reason;
      out.add(*move);
    }
  }
  if (!lr_shifted) {
    if (auto m = lr_move(current, fork_epoch)) out.add(*m);
  }
  if (auto m = level_move(s)) out.add(*m);
  return out.take();
}

bool is_module_list(const std::string& key) {
  return key == "amp.fp32_modules" || key == "amp.fp8.skip_modules";
}

Overrides union_change(const Config& current, const std::vector<TuneMove>& moves) {
  const Setting s = setting_of(current);
  // The module lists, as they grow (FP8's only under FP8: no move sets it otherwise).
  std::map<std::string, std::vector<std::string>> lists = {{"amp.fp32_modules", s.modules}};
  if (s.fp8().enabled) lists["amp.fp8.skip_modules"] = s.fp8().skip_modules;
  const auto lists_before = lists;
  std::vector<std::string> casts = current.get_string_list("casts.int32");
  const std::vector<std::string> casts_before = casts;
  Overrides out;
  std::set<std::string> keys;
  for (const TuneMove& m : moves) {
    for (const auto& [key, value] : m.change) {
      if (is_module_list(key)) {
        for (const auto& module : value.get<std::vector<std::string>>()) {
          if (!contains(lists[key], module)) lists[key].push_back(module);
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
  for (const auto& [key, list] : lists) {
    if (list != lists_before.at(key)) out.emplace_back(key, list);
  }
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

std::vector<double> precision_rank(const Config& config, double fp32_share, double fp8_share) {
  const Setting s = setting_of(config);
  return {std::isnan(fp32_share) ? 1.0 : fp32_share,
          std::isnan(fp8_share) ? 1.0 : 1.0 - fp8_share,
          static_cast<double>(amp::fp32_order(s.policy.opt_level)),
          static_cast<double>(distinct(s.modules).size()),
          s.policy.cast_model && s.batchnorm_fp32() ? 1.0 : 0.0,
          s.fp8().enabled ? static_cast<double>(distinct(s.fp8().skip_modules).size()) : 0.0};
}

namespace {
constexpr const char* kFp8Item = "fp8:";  // a module_items item kept out of FP8
}  // namespace

std::vector<std::string> module_items(const Config& solution) {
  const Setting s = setting_of(solution);
  std::vector<std::string> items = distinct(s.modules);
  if (s.fp8().enabled) {
    for (const auto& m : distinct(s.fp8().skip_modules)) items.push_back(kFp8Item + m);
  }
  return items;
}

Overrides module_probe(const Config& solution, const std::vector<std::string>& kept,
                       const std::vector<std::string>& dropped) {
  auto keeps = [&](const std::string& item) {
    return contains(kept, item) && !contains(dropped, item);
  };
  const Setting s = setting_of(solution);
  std::vector<std::string> modules, skip;
  for (const auto& m : distinct(s.modules)) {
    if (keeps(m)) modules.push_back(m);
  }
  Overrides change = {{"amp.fp32_modules", modules}};
  if (!s.fp8().enabled) return change;
  for (const auto& m : distinct(s.fp8().skip_modules)) {
    if (keeps(kFp8Item + m)) skip.push_back(m);
  }
  change.emplace_back("amp.fp8.skip_modules", skip);
  return change;
}

TuneMoveKind bisect_move(const std::vector<std::string>& dropped,
                         const std::vector<std::string>& module_items) {
  bool fp32 = false, fp8 = false;
  for (const auto& item : dropped) {
    if (!contains(module_items, item)) return TuneMoveKind::kUndo;  // a union's key
    (item.rfind(kFp8Item, 0) == 0 ? fp8 : fp32) = true;
  }
  return fp8 && !fp32 ? TuneMoveKind::kFp8SkipModules : TuneMoveKind::kFp32Modules;
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
  // Every module a fp32_modules (fp8_skip_modules) move named.
  std::map<TuneMoveKind, std::set<std::string>> modules;
  const std::map<TuneMoveKind, std::string> lists = {
      {TuneMoveKind::kFp32Modules, "amp.fp32_modules"},
      {TuneMoveKind::kFp8SkipModules, "amp.fp8.skip_modules"}};
  for (const auto& c : candidates) {
    if (!c.move) continue;
    tried[*c.move].insert(c.change_json);
    const auto key = lists.find(*c.move);
    if (key == lists.end()) continue;
    const nlohmann::json change = nlohmann::json::parse(c.change_json, nullptr, false);
    const auto list = change.is_object() ? change.find(key->second) : change.end();
    if (list == change.end() || !list->is_array()) continue;
    for (const auto& m : *list) {
      if (m.is_string()) modules[*c.move].insert(m.get<std::string>());
    }
  }
  int64_t cells = 1;
  for (const auto& [move, changes] : tried) {
    // fp32_modules, fp8_skip_modules: every subset of the modules named (the grid a user would
    // run by hand); another move: each distinct change, or none.
    const int64_t axis = lists.count(move)
                             ? (int64_t{1} << std::min<size_t>(modules[move].size(), 30))
                             : 1 + static_cast<int64_t>(changes.size());
    cells = std::min<int64_t>(cells * axis, int64_t{1} << 31);
  }
  const int64_t total = (cells + 1) * epochs;  // the grid, plus the reference
  return static_cast<int>(std::min<int64_t>(total, std::numeric_limits<int>::max()));
}

}  // namespace amptune::app
