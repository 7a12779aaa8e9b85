// train/diagnose_fp8.h: the FP8 rows of a diagnosis and their advice rules.
#include "train/diagnose_fp8.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>

#include "amp/fp8.h"
#include "train/diagnose.h"
#include "train/diagnose_text.h"

namespace amptune::train {
namespace {

using records::AdviceRule;
using records::Fp8DiagnosticRow;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double max_of(const std::string& format) {
  return amp::fp8_max(format == amp::to_string(amp::Fp8Format::kE5M2) ? amp::Fp8Format::kE5M2
                                                                      : amp::Fp8Format::kE4M3);
}

// How far beyond the format's max the tensor's amax lands at its scale (> 1: it saturates).
double overshoot(const Fp8DiagnosticRow& r) { return r.amax * r.scale / max_of(r.format); }

// The worst cosine of each module's outputs over the forward rows (NaN: lost, the worst).
std::map<std::string, double> output_cosines(const records::Diagnosis& d) {
  std::map<std::string, double> out;
  for (const auto& r : worst_rows(d)) {
    if (r.kind != records::DiagnosticKind::kForward) continue;
    auto [it, added] = out.try_emplace(r.module, r.cosine);
    if (!added && (std::isnan(r.cosine) || r.cosine < it->second)) it->second = r.cosine;
  }
  return out;
}

// Collects advice rows, each (rule, module) once: the most severe row of a module under a rule
// (the first of equals), the rows of a rule most severe first (then in the order added).
class AdviceList {
 public:
  void add(AdviceRule rule, const std::string& module, const std::string& text,
           double severity = 0) {
    for (Row& row : rows_) {
      if (row.advice.rule != rule || row.advice.module != module) continue;
      if (severity > row.severity) row = {{rule, module, text}, severity, row.order};
      return;
    }
    rows_.push_back({{rule, module, text}, severity, rows_.size()});
  }
  std::vector<records::DiagnosisAdvice> take() {
    std::sort(rows_.begin(), rows_.end(), [](const Row& a, const Row& b) {
      return std::make_tuple(static_cast<int>(a.advice.rule), -a.severity, a.order) <
             std::make_tuple(static_cast<int>(b.advice.rule), -b.severity, b.order);
    });
    std::vector<records::DiagnosisAdvice> out;
    for (Row& row : rows_) out.push_back(std::move(row.advice));
    rows_.clear();
    return out;
  }

 private:
  struct Row {
    records::DiagnosisAdvice advice;
    double severity;
    size_t order;
  };
  std::vector<Row> rows_;
};

// Per slot and role, the quantisation whose amax landed furthest beyond the format's max at its
// scale (with the scale of each batch's own step, the worst row's largest amax and smallest scale
// may come from different batches).
std::map<std::pair<std::string, std::string>, Fp8DiagnosticRow> steepest_rows(
    const records::Diagnosis& d) {
  std::map<std::pair<std::string, std::string>, Fp8DiagnosticRow> out;
  for (const auto& r : d.fp8_rows) {
    auto [it, added] = out.try_emplace({r.module, r.role}, r);
    if (!added && overshoot(r) > overshoot(it->second)) it->second = r;
  }
  return out;
}

// A delayed slot saturating beyond mild (`worst` its worst row, `steepest` its steepest one).
bool saturates_beyond_mild(const Fp8DiagnosticRow& worst, const Fp8DiagnosticRow& steepest,
                           const Fp8AdviceContext& c) {
  return c.delayed && worst.saturated_frac > 0 &&
         !(worst.saturated_frac <= kFp8MildSaturation && overshoot(steepest) <= kFp8MildOvershoot);
}

std::string keep_out(const std::string& module) {
  return "keep it out of FP8, amp.fp8.skip_modules: [" + module + "]";
}

std::string slot_text(const Fp8DiagnosticRow& r) {
  return r.role + " of " + r.module + " (" + r.format + ")";
}

// The rules over one slot's worst row `r` (saturation, flushing); `steepest` its row whose amax
// overshoots most.
void slot_advice(const Fp8DiagnosticRow& r, const Fp8DiagnosticRow& steepest,
                 const std::map<std::string, double>& cosines, const Fp8AdviceContext& c,
                 AdviceList& out) {
  const std::string module = fp8_slot_module(r.module);
  if (c.delayed && r.saturated_frac > 0) {
    const double over = overshoot(steepest);
    const std::string seen = percent(r.saturated_frac) + " of the " + slot_text(r) +
                             " saturate at the delayed scale (at worst its amax " +
                             number(steepest.amax) + " at scale " + number(steepest.scale) +
                             " lands at " + number(over) +
                             " x the format's max; the history's largest amax then " +
                             number(steepest.history_max) + ")";
    if (!saturates_beyond_mild(r, steepest, c)) {
      out.add(AdviceRule::kFp8RaiseMargin, module,
              seen + ": steady and mild, raise the margin, amp.fp8.margin: " +
                  std::to_string(c.margin + 1));
    } else {
      out.add(AdviceRule::kFp8CurrentScaling, module,
              seen + ": the amax jumped above the delayed scale's, scale from the tensor "
                     "itself, amp.fp8.recipe: current",
              over);
    }
  }
  if (!(r.flushed_frac >= kFp8FlushedMin)) return;
  const std::string flushed = percent(r.flushed_frac) + " of the nonzero " + slot_text(r) +
                              " flush to zero at scale " + number(r.scale);
  if (c.delayed && c.amax_max && c.amax_history_len > 1 && r.amax > 0 &&
      r.history_max >= kFp8StaleRatio * r.amax) {
    out.add(AdviceRule::kFp8ShortenHistory, module,
            flushed + ": the amax history holds " + number(r.history_max) + ", " +
                number(r.history_max / r.amax) + " x the tensor's amax " + number(r.amax) +
                ", a stale spike that starves the scale; shorten it, amp.fp8.amax_history_len: " +
                std::to_string(std::max<int64_t>(1, c.amax_history_len / 16)));
    return;
  }
  // Its own output may still look close (the few huge values that set the scale dominate it):
  // what was lost is what the next layers read.
  const auto cosine = cosines.find(module);
  out.add(AdviceRule::kFp8KeepOut, module,
          flushed + " (its output's cosine " +
              (cosine == cosines.end() ? std::string("not compared") : number(cosine->second)) +
              "): a few large values set the per-tensor scale and the small ones, which carry "
              "the signal, underflow; " +
              keep_out(module));
}

}  // namespace

std::string fp8_slot_module(const std::string& key) { return key.substr(0, key.find('#')); }

records::Fp8DiagnosticRow fp8_tensor_row(const at::Tensor& value, float scale,
                                         amp::Fp8Format format) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = value.detach().to(torch::kCPU, torch::kFloat).contiguous().flatten();
  const torch::Tensor q = amp::fp8_quantise(x, scale, format);
  const float max = amp::fp8_max(format);
  Fp8DiagnosticRow r;
  r.format = amp::to_string(format);
  r.scale = scale;
  r.history_min = r.history_max = kNaN;  // the caller's (Fp8Watch)
  r.numel = x.numel();
  if (r.numel == 0) {
    r.saturated_frac = r.flushed_frac = 0;
    r.sqnr_db = kNaN;
    r.amax = 0;
    return r;
  }
  const torch::Tensor finite = torch::isfinite(x);
  const torch::Tensor scaled = x * scale;  // in fp32, as the quantisation computes it
  const torch::Tensor saturated = (scaled.abs() > max) & ~torch::isnan(x);
  r.saturated_frac = saturated.sum().item<double>() / static_cast<double>(r.numel);
  const torch::Tensor nonzero = finite & (x != 0);
  const double nonzeros = nonzero.sum().item<double>();
  r.flushed_frac = nonzeros > 0 ? (nonzero & (q == 0)).sum().item<double>() / nonzeros : 0.0;
  const torch::Tensor xd = torch::where(finite, x, torch::zeros_like(x)).to(torch::kDouble);
  // What a GEMM reads: q times scale_inv (fp32), as Transformer Engine multiplies it in.
  const float scale_inv = 1.0f / scale;
  const torch::Tensor back =
      torch::where(finite, q * scale_inv, torch::zeros_like(q)).to(torch::kDouble);
  r.amax = xd.abs().max().item<double>();
  const double signal = (xd * xd).sum().item<double>();
  const double noise = ((xd - back) * (xd - back)).sum().item<double>();
  r.sqnr_db = noise > 0 ? 10.0 * std::log10(signal / noise) : kNaN;
  return r;
}

std::vector<records::Fp8DiagnosticRow> worst_fp8_rows(const records::Diagnosis& d) {
  std::map<std::pair<std::string, std::string>, Fp8DiagnosticRow> worst;
  for (const auto& r : d.fp8_rows) {
    auto [it, added] = worst.try_emplace({r.module, r.role}, r);
    if (added) continue;
    Fp8DiagnosticRow& w = it->second;
    if (std::make_pair(r.seq, r.batch) < std::make_pair(w.seq, w.batch)) {
      w.seq = r.seq;
      w.batch = r.batch;
    }
    w.numel = std::max(w.numel, r.numel);
    w.saturated_frac = std::max(w.saturated_frac, r.saturated_frac);
    w.flushed_frac = std::max(w.flushed_frac, r.flushed_frac);
    if (std::isnan(w.sqnr_db) || r.sqnr_db < w.sqnr_db) w.sqnr_db = r.sqnr_db;
    w.amax = std::max(w.amax, r.amax);
    w.scale = std::min(w.scale, r.scale);
    if (r.history_len > 0) {
      w.history_min = w.history_len > 0 ? std::min(w.history_min, r.history_min) : r.history_min;
      w.history_max = w.history_len > 0 ? std::max(w.history_max, r.history_max) : r.history_max;
      w.history_len = std::max(w.history_len, r.history_len);
    }
  }
  std::vector<Fp8DiagnosticRow> out;
  for (auto& [key, row] : worst) out.push_back(std::move(row));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.seq, a.batch, a.role) < std::make_tuple(b.seq, b.batch, b.role);
  });
  return out;
}

std::vector<records::DiagnosisAdvice> advise_fp8(const records::Diagnosis& d,
                                                 const Fp8AdviceContext& c) {
  AdviceList out;
  const std::map<std::string, double> cosines = output_cosines(d);
  const auto steepest = steepest_rows(d);
  std::vector<std::string> order;  // FP8 modules by their first forward quantisation
  // In `order`: the first module whose input or weight saturates beyond mild (none: npos).
  size_t explained = std::string::npos;
  for (const auto& r : worst_fp8_rows(d)) {
    const Fp8DiagnosticRow& s = steepest.at({r.module, r.role});
    slot_advice(r, s, cosines, c, out);
    if (r.role == amp::to_string(amp::Fp8Role::kGradOutput)) continue;
    const std::string module = fp8_slot_module(r.module);
    auto at = std::find(order.begin(), order.end(), module);
    if (at == order.end()) at = order.insert(order.end(), module);
    const auto index = static_cast<size_t>(at - order.begin());
    if (saturates_beyond_mild(r, s, c)) explained = std::min(explained, index);
  }
  // A forward departure from that module on is the saturation's (fp8_current_scaling names it):
  // keeping a module out of FP8 is not the first move for it.
  auto departs = [&](size_t index, double& cosine) {
    const auto it = cosines.find(order[index]);
    if (index >= explained || it == cosines.end()) return false;
    cosine = it->second;
    return !(cosine >= d.cosine_min);
  };
  double cosine = 0;
  if (!order.empty() && departs(order.size() - 1, cosine)) {
    out.add(AdviceRule::kFp8KeepOut, order.back(),
            order.back() + " is the last module in FP8 (the output head) and its output departs "
                           "(cosine " + number(cosine) + " < " + number(d.cosine_min) + "): " +
                keep_out(order.back()));
  }
  std::optional<size_t> most;
  double lowest = 2;
  for (size_t i = 0; i < order.size(); ++i) {
    if (departs(i, cosine) && (std::isnan(cosine) || cosine < lowest)) {
      most = i;
      lowest = std::isnan(cosine) ? -2 : cosine;
    }
  }
  if (most) {
    const std::string& module = order[*most];
    out.add(AdviceRule::kFp8KeepOut, module,
            "the output of " + module + " departs most of the modules in FP8 (cosine " +
                number(cosines.at(module)) + "): " + keep_out(module));
  }
  return out.take();
}

// ---- Fp8Watch ---------------------------------------------------------------------------------

struct Fp8Watch::Impl {
  amp::Fp8State& state;
  std::shared_ptr<const amp::Fp8Observer> previous;
  std::map<std::string, std::vector<float>> histories;  // "key.role" -> history
  std::mutex mutex;
  int batch = 0;
  int seq = 0;
  std::vector<Fp8DiagnosticRow> rows;

  explicit Impl(amp::Fp8State& s) : state(s), previous(s.observer()) { read_histories(); }

  // The histories as the state holds them now (the caller holds `mutex` or is the constructor).
  void read_histories() {
    histories.clear();
    const std::string prefix = "fp8.", suffix = ".history";
    for (const auto& [name, tensor] : state.to_tensors()) {
      if (name.size() <= prefix.size() + suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const torch::Tensor h = tensor.contiguous().cpu();
      histories[name.substr(prefix.size(), name.size() - prefix.size() - suffix.size())] =
          std::vector<float>(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
    }
  }

  void observe(const std::string& key, amp::Fp8Role role, const torch::Tensor& value, float scale,
               amp::Fp8Format format) {
    Fp8DiagnosticRow r = fp8_tensor_row(value, scale, format);
    r.module = key;
    r.role = amp::to_string(role);
    r.history_min = r.history_max = kNaN;
    std::lock_guard<std::mutex> lock(mutex);
    const auto h = histories.find(key + "." + r.role);
    if (h != histories.end()) {
      for (const float v : h->second) {
        if (std::isnan(v)) continue;  // an overflowed step's amax
        r.history_min = r.history_len ? std::min<double>(r.history_min, v) : v;
        r.history_max = r.history_len ? std::max<double>(r.history_max, v) : v;
        ++r.history_len;
      }
    }
    r.batch = batch;
    r.seq = seq++;
    rows.push_back(std::move(r));
  }
};

Fp8Watch::Fp8Watch(amp::Fp8State& state) : impl_(std::make_unique<Impl>(state)) {
  Impl* impl = impl_.get();
  state.set_observer(std::make_shared<const amp::Fp8Observer>(
      [impl](const std::string& key, amp::Fp8Role role, const torch::Tensor& value, float scale,
             amp::Fp8Format format) {
        impl->observe(key, role, value, scale, format);
        if (impl->previous) (*impl->previous)(key, role, value, scale, format);
      }));
}

Fp8Watch::~Fp8Watch() { impl_->state.set_observer(impl_->previous); }

void Fp8Watch::begin_batch(int batch) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->batch = batch;
  impl_->seq = 0;
  impl_->read_histories();
}

std::vector<records::Fp8DiagnosticRow> Fp8Watch::take() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<records::Fp8DiagnosticRow> out = std::move(impl_->rows);
  impl_->rows.clear();
  return out;
}

}  // namespace amptune::train
