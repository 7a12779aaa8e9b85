// `amptune diagnose`: the run under its precision policy against fp32, module by module (the
// forward work of diagnose.h: forward_work.cpp).
#include "train/diagnose.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "amp/emulate.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "models/scripted.h"
#include "train/casts.h"
#include "train/diagnose_fp8.h"
#include "train/diagnose_text.h"
#include "train/evaluate.h"
#include "train/plan.h"
#include "train/session.h"

namespace amptune::train {
namespace {

using records::AdviceRule;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What one pass over a batch leaves: each module's output in execution order with the share of
// its input that was inf/NaN, each parameter's gradient (scaled by the loss scale) in parameter
// order (none for a forward-only pass).
struct Pass {
  std::vector<std::pair<std::string, torch::Tensor>> outputs;
  std::vector<double> input_nonfinite;  // per output; NaN when the module passed no input
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

double nonfinite_share(const torch::Tensor& x) {
  if (!x.defined()) return kNaN;
  if (!x.is_floating_point() || x.numel() == 0) return 0.0;
  return (~torch::isfinite(x.detach())).sum().item<double>() / static_cast<double>(x.numel());
}

// `record_fp8`: the FP8 quantisations record this batch's amaxes as a training step's do (the
// caller ends the step: Fp8State::end_step); otherwise at the scales in force, nothing recorded.
Pass run_pass(Session& session, Precision& precision, const data::Batch& batch,
              const torch::Device& device, bool backward = true, bool record_fp8 = false) {
  Pass pass;
  amp::ScopedPolicy policy(precision.policy());
  amp::ScopedModules modules(precision.engine().modules());
  const std::shared_ptr<amp::Fp8State>& state = precision.engine().fp8();
  const auto fp8 = record_fp8 && state ? std::make_unique<amp::ScopedFp8>(state, true)
                                       : precision.evaluation();
  amp::ScopedObserver observer(
      [&](const std::string& name, const torch::Tensor& x, const torch::Tensor& y) {
        pass.outputs.emplace_back(name, y.detach().to(torch::kCPU, torch::kFloat, false, true));
        pass.input_nonfinite.push_back(nonfinite_share(x));
      });
  auto& model = session.task->module();
  model.train();
  precision.zero_grad();
  torch::Tensor loss;
  {
    std::optional<torch::NoGradGuard> no_grad;
    if (!backward) no_grad.emplace();
    auto autocast = precision.autocast();
    loss = session.task->train_loss(batch, device);
  }
  if (!backward) return pass;
  precision.engine().scale_loss(loss).backward();
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& g = p.value().grad();
    pass.grads.emplace_back(p.key(), g.defined()
                                         ? g.detach().to(torch::kCPU, torch::kFloat, false, true)
                                         : torch::zeros_like(p.value(), torch::kFloat).cpu());
  }
  return pass;
}

// The smallest normal value of a low-precision dtype.
double min_normal(TensorDtype dtype) {
  return dtype == TensorDtype::kBf16 ? static_cast<double>(std::numeric_limits<float>::min())
                                     : 6.103515625e-05;  // 2^-14
}

// "layer1.0.conv1" -> "layer1.0"; "" for a top-level module.
std::string parent_of(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

// The activation_overflow row of module `r`: keep it in fp32 (and, under O2/O3, its enclosing
// module, since its output is cast back to the low-precision type). `evidence` follows the
// share of overflowing outputs; `kept`: the modules in fp32 the overflow was seen with.
records::DiagnosisAdvice overflow_row(const records::DiagnosticRow& r, const AdviceContext& c,
                                    const std::string& evidence,
                                    const std::vector<std::string>& kept = {}) {
  const std::string list = "amp.fp32_modules";
  std::string advice = "activations of " + r.module + " overflow " + to_string(c.dtype) + " (" +
                       percent(r.overflow_frac) + " of its outputs" + evidence +
                       "): keep it in fp32, " + list + ": [" + r.module + "]";
  if (!kept.empty()) {
    const std::string why = " kept in fp32 (before, the inf/NaN of an earlier overflow reached it), ";
    advice = "with " + join(kept, ", ") + why + advice + "; together: " + list + ": [" +
             join(kept, ", ") + ", " + r.module + "]";
  }
  const std::string parent = parent_of(r.module);
  if (c.cast_model && !parent.empty()) {
    advice += "; under " + to_string(c.opt_level) + " its output is cast back to " +
              to_string(c.dtype) +
              ", so keep the block that brings the values back into range too: " + list + ": [" +
              parent + "]";
  }
  return {AdviceRule::kActivationOverflow, r.module, advice};
}

// Rule 1: one row per start of an activation overflow (overflow_starts), then one per overflow
// the starts hid (c.hidden_overflows), in execution order. When no overflow is known to start
// from finite input (an op outside every module overflowed, or inputs were not recorded),
// `first`, the first module whose output overflows, as before.
std::vector<records::DiagnosisAdvice> overflow_advice(const records::Diagnosis& d,
                                                    const AdviceContext& c,
                                                    const records::DiagnosticRow* first) {
  std::vector<records::DiagnosisAdvice> out;
  const std::vector<records::DiagnosticRow> starts = overflow_starts(d.rows);
  if (starts.empty()) {
    if (first) out.push_back(overflow_row(*first, c, ""));
    return out;
  }
  std::vector<HiddenOverflow> all = c.hidden_overflows;
  for (const auto& r : starts) all.push_back({r, {}});
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.row.seq < b.row.seq; });
  for (const auto& h : all) out.push_back(overflow_row(h.row, c, ", from finite inputs", h.kept));
  return out;
}

// Rule 2: scaled gradients that underflow (the parameter with the largest share above 1 %) and
// that overflow (the first parameter), each said for the kind of loss scale the run uses.
std::vector<records::DiagnosisAdvice> gradient_advice(const records::Diagnosis& d,
                                                      const AdviceContext& c) {
  const records::DiagnosticRow* under = nullptr;
  const records::DiagnosticRow* over = nullptr;
  for (const auto& r : d.rows) {
    if (r.kind != records::DiagnosticKind::kGradient) continue;
    if (r.underflow_frac > 0.01 && (!under || r.underflow_frac > under->underflow_frac)) under = &r;
    if (r.overflow_frac > 0 && !over) over = &r;
  }
  std::vector<records::DiagnosisAdvice> out;
  if (under) {
    out.push_back({AdviceRule::kGradientUnderflow, under->module,
                   percent(under->underflow_frac) + " of the gradient values of " + under->module +
                       " underflow " + to_string(c.dtype) + " at loss scale " +
                       number(d.loss_scale) +
                       (c.dynamic_scale
                            ? ": the dynamic scale is low here; raise amp.min_loss_scale or check "
                              "for repeated overflows that keep it down"
                            : ": use amp.loss_scale: dynamic, or a larger static scale")});
  }
  if (over) {
    out.push_back({AdviceRule::kGradientOverflow, over->module,
                   "scaled gradients of " + over->module + " overflow " + to_string(c.dtype) +
                       " at loss scale " + number(d.loss_scale) +
                       (c.dynamic_scale
                            ? ": such a step is skipped and the scale halved (occasional ones are "
                              "expected; when nearly every step overflows, look for an activation "
                              "overflow above)"
                            : ": every such step fails; lower amp.loss_scale or use dynamic")});
  }
  return out;
}

}  // namespace

records::DiagnosticRow compare_tensors(const at::Tensor& reference, const at::Tensor& value,
                                     TensorDtype low_dtype, double scale) {
  torch::NoGradGuard no_grad;
  records::DiagnosticRow row;
  const torch::Tensor r = reference.detach().to(torch::kCPU, torch::kDouble).flatten();
  const torch::Tensor v = value.detach().to(torch::kCPU, torch::kDouble).flatten();
  if (r.numel() != v.numel()) {
    throw ModelError("diagnose: compared tensors differ in size (" + std::to_string(r.numel()) +
                     " and " + std::to_string(v.numel()) + " elements)");
  }
  row.numel = r.numel();
  const double n = static_cast<double>(std::max<int64_t>(row.numel, 1));
  const torch::Tensor finite = torch::isfinite(r) & torch::isfinite(v);
  const torch::Tensor rf = torch::where(finite, r, torch::zeros_like(r));
  const torch::Tensor vf = torch::where(finite, v / scale, torch::zeros_like(v));
  const double nr = rf.norm().item<double>(), nv = vf.norm().item<double>();
  if ((torch::isfinite(r) & ~torch::isfinite(v)).any().item<bool>()) {
    row.cosine = kNaN;  // values lost to inf/NaN: no direction to compare (stored as NULL)
  } else if (rf.equal(vf)) {
    row.cosine = 1.0;
  } else if (nr == 0 || nv == 0) {
    row.cosine = 0.0;
  } else {
    row.cosine = std::clamp((rf * vf).sum().item<double>() / (nr * nv), -1.0, 1.0);
  }
  const torch::Tensor diff = (vf - rf).abs();
  row.max_abs_err = row.numel ? diff.max().item<double>() : 0.0;
  const torch::Tensor nonzero = finite & (r != 0);
  const torch::Tensor rel = torch::where(nonzero, diff / rf.abs(), torch::zeros_like(diff));
  row.max_rel_err = row.numel ? rel.max().item<double>() : 0.0;
  row.frac_rel_err_1e3 = (rel > 1e-3).sum().item<double>() / n;
  row.frac_rel_err_5e3 = (rel > 5e-3).sum().item<double>() / n;
  if (low_dtype != TensorDtype::kFp16 && low_dtype != TensorDtype::kBf16) {
    row.overflow_frac = row.underflow_frac = kNaN;
    return row;
  }
  // The tensor as the low-precision device holds it (a no-op for values already on the grid).
  const torch::Tensor low =
      amp::round_to_grid(value.detach().to(torch::kCPU, torch::kFloat).flatten(),
                         low_dtype == TensorDtype::kBf16 ? Dtype::kBf16 : Dtype::kFp16)
          .to(torch::kDouble);
  const torch::Tensor ref_scaled = r * scale;
  row.overflow_frac = (~torch::isfinite(low) & torch::isfinite(r)).sum().item<double>() / n;
  const torch::Tensor flushed = (low == 0) & (ref_scaled != 0) & torch::isfinite(r);
  const torch::Tensor subnormal = (low != 0) & (low.abs() < min_normal(low_dtype));
  row.underflow_frac = (flushed | subnormal).sum().item<double>() / n;
  return row;
}

std::vector<records::DiagnosticRow> worst_rows(const records::Diagnosis& d) {
  // Keyed by the kind's word, so the order is cast, forward, gradient, as the table sorts it.
  std::map<std::pair<std::string, int>, records::DiagnosticRow> worst;
  for (const auto& r : d.rows) {
    auto [it, added] = worst.try_emplace({records::to_string(r.kind), r.seq}, r);
    if (added) continue;
    records::DiagnosticRow& w = it->second;
    if (std::isnan(r.cosine) || r.cosine < w.cosine) w.cosine = r.cosine;
    for (auto [mine, theirs] : {std::pair{&w.max_abs_err, r.max_abs_err},
                                {&w.max_rel_err, r.max_rel_err},
                                {&w.frac_rel_err_1e3, r.frac_rel_err_1e3},
                                {&w.frac_rel_err_5e3, r.frac_rel_err_5e3},
                                {&w.overflow_frac, r.overflow_frac},
                                {&w.underflow_frac, r.underflow_frac}}) {
      if (theirs > *mine) *mine = theirs;
    }
  }
  std::vector<records::DiagnosticRow> out;
  out.reserve(worst.size());
  for (auto& [key, row] : worst) out.push_back(std::move(row));
  return out;
}

std::vector<records::DiagnosticRow> rows_by_severity(const records::Diagnosis& d) {
  std::vector<records::DiagnosticRow> rows = worst_rows(d);
  auto rank = [](const records::DiagnosticRow& r) {
    const bool overflows = r.overflow_frac > 0;
    return std::make_tuple(overflows ? 0 : 1,
                           overflows && r.kind == records::DiagnosticKind::kForward ? 0 : 1,
                           overflows ? r.seq : 0, std::isnan(r.cosine) ? -2.0 : r.cosine);
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return rows;
}

std::optional<records::DiagnosticRow> first_divergence(const records::Diagnosis& d) {
  for (const auto& w : worst_rows(d)) {  // forward rows come in seq order
    if (w.kind == records::DiagnosticKind::kForward &&
        (!(w.cosine >= d.cosine_min) || w.overflow_frac > 0))
      return w;
  }
  return std::nullopt;
}

std::vector<records::DiagnosticRow> overflow_starts(
    const std::vector<records::DiagnosticRow>& rows) {
  std::map<std::string, records::DiagnosticRow> by_module;  // the worst of its first call
  for (const auto& r : rows) {
    if (r.kind != records::DiagnosticKind::kForward || !(r.overflow_frac > 0) ||
        r.input_nonfinite_frac != 0)
      continue;
    auto [it, added] = by_module.try_emplace(r.module, r);
    records::DiagnosticRow& w = it->second;
    if (added || r.seq > w.seq) continue;
    if (r.seq < w.seq) {
      w = r;
    } else if (r.overflow_frac > w.overflow_frac) {
      w.overflow_frac = r.overflow_frac;
      w.batch = r.batch;
    }
  }
  std::vector<records::DiagnosticRow> out;
  for (const auto& [module, row] : by_module) {
    bool parent = false;  // of another start: it only contains the overflow
    for (const auto& [other, unused] : by_module) {
      parent = parent || (other != module && (module.empty() || other.rfind(module + ".", 0) == 0));
    }
    if (!parent) out.push_back(row);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

std::vector<records::DiagnosisAdvice> advise(const records::Diagnosis& d, const AdviceContext& c) {
  std::vector<records::DiagnosisAdvice> out;
  const std::string list = "amp.fp32_modules";
  // 1. Where activations overflow: every start (overflow_starts) and those it hid.
  const records::DiagnosticRow* overflow = nullptr;  // the first in execution order
  for (const auto& r : d.rows) {
    if (r.kind == records::DiagnosticKind::kForward && r.overflow_frac > 0 &&
        (!overflow || r.seq < overflow->seq)) {
      overflow = &r;
    }
  }
  for (auto& advice : overflow_advice(d, c, overflow)) out.push_back(std::move(advice));
  // 2. Scaled gradients: underflow (the worst parameter) and overflow.
  for (auto& advice : gradient_advice(d, c)) out.push_back(std::move(advice));
  // 3. BatchNorm in low precision that departs.
  if (c.batchnorm_low) {
    for (const auto& r : d.rows) {
      if (r.kind == records::DiagnosticKind::kForward && c.batchnorm_modules.count(r.module) &&
          !(r.cosine >= d.cosine_min)) {
        out.push_back({AdviceRule::kBatchnormLowPrecision, r.module,
                       "BatchNorm " + r.module + " runs in " + to_string(c.dtype) +
                           " and departs (cosine " + number(r.cosine) +
                           "): set amp.keep_batchnorm_fp32: true"});
        break;
      }
    }
  }
  // 4. The first module that departs without overflowing.
  if (auto first = first_divergence(d); first && (!overflow || first->seq < overflow->seq)) {
    const records::DiagnosticRow& r = *first;
    if (!(r.overflow_frac > 0)) {
      out.push_back({AdviceRule::kFirstDeparture, r.module,
                     r.module + " is the first module whose output departs from " +
                         to_string(d.against) + " (cosine " + number(r.cosine) + " < " +
                         number(d.cosine_min) + "): try " + list + ": [" + r.module +
                         "] to see whether it explains the accuracy gap"});
    }
  }
  // 5. Cast points whose truncation is large.
  for (const auto& r : d.rows) {
    if (r.kind == records::DiagnosticKind::kCast && r.frac_rel_err_1e3 > 0.01) {
      out.push_back({AdviceRule::kCastPoint, r.module,
                     "casts.int32 point " + r.module + " truncates " + percent(r.frac_rel_err_1e3) +
                         " of its values by more than 1e-3 relative (max absolute error " +
                         number(r.max_abs_err) + "): remove it from casts.int32"});
      break;
    }
  }
  return out;
}

void check_options(const DiagnoseOptions& options) {
  if (options.batches < 1) throw ConfigError("diagnose --batches must be at least 1");
  if (!(options.cosine_min > 0 && options.cosine_min <= 1)) {
    throw ConfigError("diagnose --cosine-min must be in (0, 1]");
  }
  if (!parse_opt_level(options.against)) {
    throw ConfigError("diagnose --against must be one of O0, O1, O2, O3, got '" +
                      options.against + "'");
  }
}

std::optional<records::EpochRow> pick_checkpoint(const RunInput& run,
                                                 const std::vector<records::EpochRow>& rows,
                                                 const DiagnoseOptions& options) {
  int epoch = -1;
  if (options.epoch) {
    EvalOptions eval;
    eval.epoch = options.epoch;
    epoch = checkpoint_epochs(run, rows, eval).back();  // names the saved epochs otherwise
  } else {
    for (const auto& row : rows) {
      if (row.checkpoint) epoch = row.epoch;
    }
  }
  for (const auto& row : rows) {
    if (row.epoch == epoch) return row;
  }
  return std::nullopt;
}

namespace {

// The reference: the run's config at opt level `against` with the amp keys at their defaults.
Config reference_config(const Config& config, const std::string& against) {
  Config reference = config;
  reference.set("amp.opt_level", against);  // one of O0-O3 (check_options)
  for (const char* key : {"amp.keep_batchnorm_fp32", "amp.master_weights", "amp.loss_scale"}) {
    reference.set(key, "auto");
  }
  reference.set("amp.fp32_modules", nlohmann::json::array());
  reference.set("amp.combine_grad", false);
  reference.set("amp.fp8.enabled", false);  // FP8 is compared against the reference's fp32
  return reference;
}

// Which outputs and gradients of the run are low precision, and what the advice rules need to
// know of its policy.
struct PrecisionMap {
  AdviceContext context;
  TensorDtype low = TensorDtype::kFp32;  // fp16 / bf16; fp32 when the policy has none
  std::set<std::string> fp32_outputs;    // modules kept in fp32
  std::vector<TensorDtype> grad_dtype;   // per parameter, in parameter order

  TensorDtype output_dtype(const std::string& module) const {
    return fp32_outputs.count(module) ? TensorDtype::kFp32 : low;
  }
};

// Not those of fp32 modules; BatchNorm parameters only when the policy holds them low
// (BatchNorm computes in fp32 under O1).
PrecisionMap map_precision(Session& session, Precision& precision) {
  const amp::Policy& policy = precision.policy();
  PrecisionMap map;
  map.low = policy.low_precision() ? tensor_dtype(policy.dtype) : TensorDtype::kFp32;
  AdviceContext& context = map.context;
  context.opt_level = policy.opt_level;
  context.dtype = policy.dtype;
  context.dynamic_scale = policy.dynamic_scale;
  context.cast_model = policy.cast_model;
  context.batchnorm_low = policy.cast_model && !policy.keep_batchnorm_fp32;
  const auto& modules = *precision.engine().modules();
  std::set<const void*> batchnorm_params;
  for (const auto& m : session.task->module().named_modules("", /*include_self=*/false)) {
    if (const auto* entry = modules.find(*m.value()); entry && entry->fp32) {
      map.fp32_outputs.insert(m.key());
    }
    if (!m.value()->as<torch::nn::BatchNorm2d>()) continue;
    context.batchnorm_modules.insert(m.key());
    for (const auto& p : m.value()->parameters(false)) {
      batchnorm_params.insert(p.unsafeGetTensorImpl());
    }
  }
  const auto params = session.task->module().parameters(true);
  const auto& mask = precision.engine().low_precision_mask();
  for (size_t i = 0; i < params.size(); ++i) {
    bool is_low = policy.low_precision() && !modules.fp32_tensor(params[i]) &&
                  !batchnorm_params.count(params[i].unsafeGetTensorImpl());
    if (policy.cast_model) is_low = mask[i];
    map.grad_dtype.push_back(is_low ? map.low : TensorDtype::kFp32);
  }
  return map;
}

// The run under its policy and the reference, built from the same fp32 values.
struct Sides {
  Session& run;
  Precision& run_precision;
  Session& reference;
  Precision& reference_precision;
  const torch::Device& device;
};

// The rows of batch `b` of the module outputs of `got` (the run's policy) against `want` (the
// reference's), with the share of each module's input that was inf/NaN.
std::vector<records::DiagnosticRow> forward_rows(const Pass& want, const Pass& got, int b,
                                               const PrecisionMap& map) {
  if (want.outputs.size() != got.outputs.size()) {
    throw ModelError("diagnose: the reference ran " + std::to_string(want.outputs.size()) +
                     " modules and the run's policy " + std::to_string(got.outputs.size()));
  }
  std::vector<records::DiagnosticRow> rows;
  for (size_t i = 0; i < got.outputs.size(); ++i) {
    const std::string& name = got.outputs[i].first;
    records::DiagnosticRow r =
        compare_tensors(want.outputs[i].second, got.outputs[i].second, map.output_dtype(name));
    r.kind = records::DiagnosticKind::kForward;
    r.batch = b;
    r.seq = static_cast<int>(i);
    r.module = name;
    r.dtype = map.output_dtype(name);
    r.input_nonfinite_frac = got.input_nonfinite[i];
    rows.push_back(std::move(r));
  }
  return rows;
}

// Appends to `d` the rows of batch `b`: every module output and every gradient of the run
// against the reference's, and every int32 cast point's values against the uncast ones. The run's
// FP8 scaling state advances by the batch as a training step's does (its amaxes enter the
// histories; the weights stay), so the next batch is quantised at the scales training would use.
void compare_batch(const Sides& sides, const data::Batch& batch, int b, const PrecisionMap& map,
                   const Int32Casts& casts, records::Diagnosis& d) {
  const Pass want = run_pass(sides.reference, sides.reference_precision, batch, sides.device);
  const Pass got = run_pass(sides.run, sides.run_precision, batch, sides.device, true, true);
  if (const auto& fp8 = sides.run_precision.engine().fp8()) fp8->end_step();
  for (auto& r : forward_rows(want, got, b, map)) d.rows.push_back(std::move(r));
  auto add = [&](records::DiagnosticRow r, records::DiagnosticKind kind, int seq,
                 const std::string& module, TensorDtype dtype) {
    r.kind = kind;
    r.batch = b;
    r.seq = seq;
    r.module = module;
    r.dtype = dtype;
    r.input_nonfinite_frac = kNaN;  // forward rows only
    d.rows.push_back(std::move(r));
  };
  for (size_t i = 0; i < got.grads.size(); ++i) {
    add(compare_tensors(want.grads[i].second, got.grads[i].second, map.grad_dtype[i], d.loss_scale),
        records::DiagnosticKind::kGradient, static_cast<int>(i), got.grads[i].first,
        map.grad_dtype[i]);
  }
  int seq = 0;
  for (const auto& point : int32_cast_points()) {
    if (!casts.has(point)) continue;
    auto fields = batch.fields;
    const Int32Casts one({point});
    one.apply(fields, /*train=*/true);
    one.apply(fields, /*train=*/false);
    for (const auto& [field, cast] : fields) {
      const torch::Tensor& original = batch.fields.at(field);
      if (cast.is_same(original)) continue;
      add(compare_tensors(original, cast, TensorDtype::kInt32), records::DiagnosticKind::kCast,
          seq++, point, TensorDtype::kInt32);
    }
  }
}

// What a further pass needs: the run's config and fp32 values, the reference, the batches.
struct Probe {
  const Config& config;
  const std::string& origin;  // "run NAME"
  const std::map<std::string, torch::Tensor>& values;
  Session& reference;
  Precision& reference_precision;
  const std::vector<data::Batch>& batches;
  const torch::Device& device;
  // The run's FP8 scaling state as the checkpoint held it (Fp8State::to_tensors; empty without
  // FP8): the probes quantise at the scales the run's own passes started from.
  const std::map<std::string, torch::Tensor>& fp8_state;
};

// The forward rows of the run's policy with `kept` added to its amp.fp32_modules, against the
// reference, on the probe's batches (no gradients).
std::vector<records::DiagnosticRow> forward_with_kept(const Probe& p,
                                                    const std::vector<std::string>& kept) {
  Config config = p.config;
  nlohmann::json modules = config.at("amp.fp32_modules");
  for (const auto& k : kept) modules.push_back(k);
  config.set("amp.fp32_modules", modules);
  const Settings settings = Settings::from(config);
  Precision precision(amp::resolve_policy(settings.amp, p.device.is_cuda()));
  Session session = build_session(settings, p.device, precision, &p.values, p.origin);
  if (const auto& fp8 = precision.engine().fp8()) fp8->load(p.fp8_state, p.origin);
  const PrecisionMap map = map_precision(session, precision);
  std::vector<records::DiagnosticRow> rows;
  for (size_t b = 0; b < p.batches.size(); ++b) {
    const Pass want = run_pass(p.reference, p.reference_precision, p.batches[b], p.device, false);
    const Pass got = run_pass(session, precision, p.batches[b], p.device, false);
    for (auto& r : forward_rows(want, got, static_cast<int>(b), map)) rows.push_back(std::move(r));
  }
  return rows;
}

// The overflows the starts in `rows` hide (HiddenOverflow): pass after pass with the modules
// named so far kept in fp32 (under O2/O3 their enclosing blocks, as the advice says), until a
// pass finds no new start. Each pass names at least one new module, so there are at most as many
// passes as modules.
std::vector<HiddenOverflow> hidden_overflows(const Probe& p,
                                             const std::vector<records::DiagnosticRow>& rows,
                                             bool cast_model) {
  std::vector<HiddenOverflow> hidden;
  std::set<std::string> named;
  std::vector<std::string> kept;
  auto keep = [&](const std::string& module) {
    named.insert(module);
    const std::string parent = parent_of(module);
    kept.push_back(cast_model && !parent.empty() ? parent : module);
  };
  for (const auto& r : overflow_starts(rows)) keep(r.module);
  while (!kept.empty()) {
    std::vector<records::DiagnosticRow> fresh;
    for (const auto& r : overflow_starts(forward_with_kept(p, kept))) {
      if (!named.count(r.module)) fresh.push_back(r);
    }
    if (fresh.empty()) break;
    for (const auto& r : fresh) {
      log::info(p.origin + ": with " + join(kept, ", ") + " kept in fp32, " + r.module +
                " overflows too");
      hidden.push_back({r, kept});
    }
    for (const auto& r : fresh) keep(r.module);
  }
  return hidden;
}

}  // namespace

records::Diagnosis diagnose(const RunInput& run,
                            const std::optional<records::EpochRow>& checkpoint,
                            const DiagnoseOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  check_options(options);
  const Config& config = run.config();
  const Config reference = reference_config(config, options.against);
  const int epoch = checkpoint ? checkpoint->epoch : -1;
  const Settings& settings = run.settings();
  torch::set_num_threads(resolve_threads(settings, options.threads));
  const torch::Device device = pick_device(settings.device);

  // The run as it trained, from its checkpoint (or its initial weights).
  Precision precision(amp::resolve_policy(settings.amp, device.is_cuda()));
  Session session = checkpoint ? load_session(run, *checkpoint, device, precision)
                               : build_session(settings, device, precision);
  // The reference from the same fp32 values (O2 runs: the masters).
  const auto values = full_precision_state(session.task->module(), precision.engine());
  const Settings ref_settings = Settings::from(reference);
  Precision ref_precision(amp::resolve_policy(ref_settings.amp, device.is_cuda()));
  Session ref = build_session(ref_settings, device, ref_precision, &values, "run " + run.name);
  const PrecisionMap map = map_precision(session, precision);
  const Int32Casts casts(settings.casts.int32);

  records::Diagnosis d;
  d.run_id = run.id;
  d.epoch = epoch;
  d.against = *parse_opt_level(options.against);  // checked (check_options)
  d.cosine_min = options.cosine_min;
  d.loss_scale = precision.engine().scaler().scale();

  auto train_set = data::make_dataset(settings.data, settings.rootnet,
                                      settings.model, data::Split::kTrain);
  data::LoaderOptions opts = data::loader_options(settings.data, settings.seed, data::Split::kTrain,
                                                  static_cast<uint64_t>(epoch + 1));
  opts.max_batches = options.batches;
  data::Loader loader(train_set, opts);
  log::info("run " + run.name + ": diagnosing " +
            (epoch >= 0 ? "epoch " + std::to_string(epoch) : std::string("the initial weights")) +
            " under " + to_string(map.context.opt_level) + " " + to_string(map.low) + " (" +
            amp::to_string(precision.policy().backend) + ") against " + options.against + " on " +
            std::to_string(options.batches) + " training batch(es)");
  const Sides sides{session, precision, ref, ref_precision, device};
  // Every FP8 quantisation of the run's passes (docs/AMP.md "Diagnosing FP8").
  const std::shared_ptr<amp::Fp8State>& fp8 = precision.engine().fp8();
  const std::map<std::string, torch::Tensor> fp8_start =
      fp8 ? fp8->to_tensors() : std::map<std::string, torch::Tensor>{};
  std::unique_ptr<Fp8Watch> watch = fp8 ? std::make_unique<Fp8Watch>(*fp8) : nullptr;
  std::vector<data::Batch> batches;
  while (auto batch = loader.next()) {
    if (batch->size == 0) continue;
    if (watch) watch->begin_batch(static_cast<int>(batches.size()));
    compare_batch(sides, *batch, static_cast<int>(batches.size()), map, casts, d);
    batches.push_back(std::move(*batch));
  }
  if (watch) d.fp8_rows = watch->take();
  watch.reset();
  if (batches.empty()) {
    throw DataError("diagnose: the training split of run " + run.name + " gave no batch");
  }
  d.batches = static_cast<int>(batches.size());
  AdviceContext context = map.context;
  const std::string origin = "run " + run.name;
  context.hidden_overflows = hidden_overflows(
      {config, origin, values, ref, ref_precision, batches, device, fp8_start}, d.rows,
      context.cast_model);
  d.advice = advise(d, context);
  if (const amp::Fp8Policy& f = precision.policy().fp8; f.enabled) {
    for (auto& a : advise_fp8(d, {f.delayed, f.amax_max, f.margin, f.amax_history_len})) {
      d.advice.push_back(std::move(a));
    }
  }
  d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return d;
}

}  // namespace amptune::train
