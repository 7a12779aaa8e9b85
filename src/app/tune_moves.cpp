// app/tune_moves.h: the rules of amptune tune as pure functions.
#include "app/tune_moves.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

namespace amptune::app {

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

std::optional<int> first_exit(const std::map<int, double>& values,
                              const std::map<int, double>& reference, const Tolerance& tolerance) {
  for (const auto& [epoch, value] : values) {
    auto ref = reference.find(epoch);
    if (ref == reference.end()) continue;
    if (!tolerance.within(value, ref->second)) return epoch;
  }
  return std::nullopt;
}

namespace {

// `names` without repeats, in the order of their first appearance.
std::vector<std::string> distinct(const std::vector<std::string>& names) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& name : names) {
    if (seen.insert(name).second) out.push_back(name);
  }
  return out;
}

std::string parent_of(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

int level_of(const std::string& opt_level) {  // O0 -> 0 ... O3 -> 3
  return opt_level.size() == 2 && opt_level[0] == 'O' ? opt_level[1] - '0' : 0;
}

// Whether the loss scale is static (a number, or auto where the opt level's default is: O3).
bool static_scale(const Config& c) {
  const nlohmann::json& s = c.at("amp.loss_scale");
  if (s.is_number()) return s.get<double>() > 0;
  return s.is_string() && s.get<std::string>() == "auto" && c.get_string("amp.opt_level") == "O3";
}

std::string scale_text(const Config& c) {
  const nlohmann::json& s = c.at("amp.loss_scale");
  return s.is_string() ? s.get<std::string>() + " (static 1.0 under O3)" : s.dump();
}

// BatchNorm held in fp32: O0, O1 (per-op casts keep it), O2 unless keep_batchnorm_fp32 false.
bool batchnorm_fp32(const Config& c) {
  const std::string level = c.get_string("amp.opt_level");
  const std::string keep = c.get_string("amp.keep_batchnorm_fp32");
  if (level == "O2") return keep != "false";
  if (level == "O3") return keep == "true";
  return true;
}

bool allowed_move(const std::vector<std::string>& allowed, const std::string& move) {
  return std::find(allowed.begin(), allowed.end(), move) != allowed.end();
}

}  // namespace

std::vector<TuneMove> candidate_moves(const Config& current,
                                      const std::vector<store::DiagnosisAdvice>& advice,
                                      const std::vector<std::string>& allowed, int fork_epoch,
                                      bool lr_shifted) {
  std::vector<TuneMove> out;
  std::set<std::string> changes;  // dumps of the changes listed
  auto add = [&](TuneMove move) {
    if (!allowed_move(allowed, move.move)) return;
    nlohmann::json key = nlohmann::json::array();
    for (const auto& [k, v] : move.change) key.push_back({k, v});
    if (changes.insert(key.dump()).second) out.push_back(std::move(move));
  };
  const std::string level = current.get_string("amp.opt_level");
  const bool cast_model = level == "O2" || level == "O3";
  const auto modules = current.get_string_list("amp.fp32_modules");
  const auto casts = current.get_string_list("casts.int32");
  auto with_module = [&](const std::string& module) {
    auto list = modules;
    list.push_back(module);
    return nlohmann::json(list);
  };
  for (const store::DiagnosisAdvice& a : advice) {
    TuneMove m;
    m.advice_rule = a.rule;
    m.advice_module = a.module;
    if ((a.rule == "activation_overflow" || a.rule == "first_departure") && !a.module.empty()) {
      std::string module = a.module;
      const std::string parent = parent_of(module);
      if (a.rule == "activation_overflow" && cast_model && !parent.empty()) module = parent;
      if (std::find(modules.begin(), modules.end(), module) != modules.end()) continue;
      m.move = "fp32_modules";
      m.change = {{"amp.fp32_modules", with_module(module)}};
      m.reason =
          "the diagnosis's " + a.rule + " names " + a.module + ": keep " + module + " in fp32";
    } else if ((a.rule == "gradient_underflow" || a.rule == "gradient_overflow") &&
               static_scale(current)) {
      m.move = "loss_scale";
      m.change = {{"amp.loss_scale", "dynamic"}};
      m.reason = "the diagnosis's " + a.rule + " (" + a.module + ") at the static scale " +
                 scale_text(current) + ": scale dynamically";
    } else if (a.rule == "batchnorm_low_precision" && !batchnorm_fp32(current)) {
      m.move = "keep_batchnorm_fp32";
      m.change = {{"amp.keep_batchnorm_fp32", "true"}};
      m.reason = "the diagnosis finds BatchNorm " + a.module + " departing in low precision";
    } else if (a.rule == "cast_point" &&
               std::find(casts.begin(), casts.end(), a.module) != casts.end()) {
      auto kept = casts;
      kept.erase(std::remove(kept.begin(), kept.end(), a.module), kept.end());
      m.move = "casts";
      m.change = {{"casts.int32", kept}};
      m.reason = "the diagnosis finds the int32 cast of " + a.module + " truncating its values";
    } else {
      continue;
    }
    add(std::move(m));
  }
  // The move order, cheapest (least fp32 work added) first.
  if (static_scale(current)) {
    add({"loss_scale",
         {{"amp.loss_scale", "dynamic"}},
         "move order: the static loss scale " + scale_text(current) + " -> dynamic",
         "",
         ""});
  }
  if (!casts.empty()) {
    add({"casts",
         {{"casts.int32", nlohmann::json::array()}},
         "move order: no int32 casts in the data path",
         "",
         ""});
  }
  if (cast_model && !batchnorm_fp32(current)) {
    add({"keep_batchnorm_fp32",
         {{"amp.keep_batchnorm_fp32", "true"}},
         "move order: BatchNorm in fp32",
         "",
         ""});
  }
  if (!lr_shifted) {
    const int64_t epochs = current.get_int("schedule.epochs");
    auto decay = current.at("schedule.lr_dec_epoch").get<std::vector<int64_t>>();
    bool moved = false;
    for (auto& e : decay) {
      if (e > fork_epoch && e + 1 < epochs) {
        ++e;
        moved = true;
      }
    }
    if (moved) {
      add({"lr_dec_epoch",
           {{"schedule.lr_dec_epoch", decay}},
           "move order: each learning-rate decay after epoch " + std::to_string(fork_epoch) +
               " one epoch later",
           "",
           ""});
    }
  }
  if (level == "O3") {
    add({"opt_level",
         {{"amp.opt_level", "O2"}},
         "move order: O3 -> O2 (fp32 master weights)",
         "",
         ""});
  } else if (level == "O2") {
    add({"opt_level",
         {{"amp.opt_level", "O1"},
          {"amp.keep_batchnorm_fp32", "auto"},
          {"amp.master_weights", "auto"}},
         "move order: O2 -> O1 (per-op casts, fp32 weights)",
         "",
         ""});
  }
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
  const int level = level_of(config.get_string("amp.opt_level"));
  const bool cast_model = level >= 2;
  return {std::isnan(fp32_share) ? 1.0 : fp32_share, static_cast<double>(3 - level),
          static_cast<double>(distinct(config.get_string_list("amp.fp32_modules")).size()),
          cast_model && batchnorm_fp32(config) ? 1.0 : 0.0};
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

int grid_epochs(const std::vector<store::TuneCandidateRow>& candidates, int epochs) {
  std::map<std::string, std::set<std::string>> tried;
  for (const auto& c : candidates) {
    if (c.move.empty()) continue;
    tried[c.move].insert(c.change_json);
  }
  int64_t cells = 1;
  for (const auto& [move, changes] : tried) cells *= 1 + static_cast<int64_t>(changes.size());
  const int64_t total = (cells + 1) * epochs;  // the grid, plus the reference
  return static_cast<int>(std::min<int64_t>(total, std::numeric_limits<int>::max()));
}

}  // namespace amptune::app
