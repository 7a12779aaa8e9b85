#include "amp/fp8.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace amptune::amp {
namespace {

struct Layout {
  int mantissa_bits;  // 3 | 2
  int min_exponent;   // of a normal value: -6 | -14
  float max;
};

Layout layout(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? Layout{3, -6, 448.0f} : Layout{2, -14, 57344.0f};
}

// |x| rounded to `l`'s grid, ties to even, below max (the caller saturates).
inline float round_magnitude(float a, const Layout& l) {
  if (a < std::ldexp(1.0f, l.min_exponent)) {
    // Subnormal in the target: a multiple of 2^(min_exponent - mantissa_bits). Scaling by a power
    // of two is exact, and nearbyint rounds ties to even in the default rounding mode.
    const int shift = l.mantissa_bits - l.min_exponent;
    return std::ldexp(std::nearbyint(std::ldexp(a, shift)), -shift);
  }
  // Normal: keep `mantissa_bits` of fp32's 23, round to nearest even on the bits dropped (a carry
  // into the exponent is the right answer).
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  const int drop = 23 - l.mantissa_bits;
  const uint32_t half = (1u << (drop - 1)) - 1u + ((bits >> drop) & 1u);
  bits = (bits + half) & ~((1u << drop) - 1u);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline float round_one(float x, const Layout& l) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  float r = a >= l.max ? l.max : round_magnitude(a, l);
  if (r > l.max) r = l.max;
  return std::copysign(r, x);
}

// The same with tensor ops (any device): exponent from frexp, the quantum a power of two, so
// x / quantum is exact and round() (half to even) rounds as round_one does.
torch::Tensor round_with_ops(const torch::Tensor& x, const Layout& l) {
  torch::NoGradGuard no_grad;
  const torch::Tensor a = x.abs();
  // frexp: a = m * 2^e with m in [0.5, 1), so floor(log2 a) = e - 1.
  const torch::Tensor e = std::get<1>(torch::frexp(a)) - 1;
  const torch::Tensor exponent = torch::clamp_min(e, l.min_exponent);
  const torch::Tensor quantum = torch::pow(2.0, (exponent - l.mantissa_bits).to(torch::kFloat));
  torch::Tensor r = torch::round(a / quantum) * quantum;
  r = torch::clamp_max(r, l.max);  // also +inf and values rounding past max
  r = torch::where(torch::isnan(x), x, torch::copysign(r, x));
  return r;
}

// The amax a delayed scale is computed from: the history's largest finite entry (max) or its
// newest (most_recent; non-finite there gives scale 1). An overflowed step's inf or NaN stays in
// the history for diagnose but does not set the scale of the steps after it.
float history_amax(const std::vector<float>& h, bool amax_max) {
  if (h.empty()) return 0.0f;
  if (!amax_max) return h.back();
  float m = 0.0f;
  for (float v : h) {
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

}  // namespace

torch::Tensor round_to_fp8_ops(const torch::Tensor& x, Fp8Format format) {
  return round_with_ops(x, layout(format));
}

float fp8_max(Fp8Format format) { return layout(format).max; }

const char* to_string(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}

const char* to_string(Fp8Role role) {
  switch (role) {
    case Fp8Role::kInput: return "input";
    case Fp8Role::kWeight: return "weight";
    case Fp8Role::kGradOutput: return "grad_output";
  }
  return "?";
}

float round_fp8(float x, Fp8Format format) { return round_one(x, layout(format)); }

void round_fp8(const float* src, float* dst, int64_t n, Fp8Format format) {
  const Layout l = layout(format);
  for (int64_t i = 0; i < n; ++i) dst[i] = round_one(src[i], l);
}

torch::Tensor round_to_fp8(const torch::Tensor& x, Fp8Format format) {
  if (x.scalar_type() != torch::kFloat) {
    throw std::invalid_argument("round_to_fp8 takes fp32 tensors");
  }
  if (!x.device().is_cpu()) return round_to_fp8_ops(x, format);
  const torch::Tensor src = x.contiguous();
  torch::Tensor out = torch::empty_like(src);
  const float* in = src.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, src.numel(), 32768, [&](int64_t begin, int64_t end) {
    round_fp8(in + begin, o + begin, end - begin, format);
  });
  return out;
}

float fp8_scale_from_amax(float amax, Fp8Format format, int margin) {
  if (!(amax > 0.0f) || std::isinf(amax)) return 1.0f;
  float scale = fp8_max(format) / amax;
  scale = std::ldexp(scale, -margin);
  if (std::isinf(scale)) return FLT_MAX;
  return scale;
}

torch::Tensor fp8_quantise(const torch::Tensor& x, float scale, Fp8Format format) {
  torch::NoGradGuard no_grad;
  return round_to_fp8(x * scale, format);
}

// ---- Fp8Slot ----------------------------------------------------------------------------------

Fp8Slot::Fp8Slot(Fp8Format format, const Fp8Scaling& scaling)
    : format_(format), scaling_(scaling) {}

float Fp8Slot::scale_for(const torch::Tensor& x, float amax, bool record) {
  if (amax < 0.0f) {
    torch::NoGradGuard no_grad;
    amax = x.numel() == 0 ? 0.0f : x.abs().max().item<float>();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!record) {
    return scaling_.delayed ? scale_ : fp8_scale_from_amax(amax, format_, scaling_.margin);
  }
  // A NaN amax (the step overflowed) stays the step's amax.
  const bool nan = std::isnan(amax) || (seen_ && std::isnan(step_amax_));
  step_amax_ = nan ? NAN : seen_ ? std::max(step_amax_, amax) : amax;
  seen_ = true;
  if (scaling_.delayed) return scale_;
  return fp8_scale_from_amax(amax, format_, scaling_.margin);
}

float Fp8Slot::scale() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scale_;
}

float Fp8Slot::step_amax() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return step_amax_;
}

void Fp8Slot::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  const float amax = seen_ ? step_amax_ : 0.0f;
  const auto len = static_cast<size_t>(scaling_.amax_history_len);
  if (ring_.size() < len) {
    ring_.push_back(amax);
  } else {
    ring_[static_cast<size_t>(next_)] = amax;
    next_ = (next_ + 1) % scaling_.amax_history_len;
  }
  seen_ = false;
  step_amax_ = 0.0f;
  recompute_scale();
}

std::vector<float> Fp8Slot::history() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return history_locked();
}

std::vector<float> Fp8Slot::history_locked() const {
  if (ring_.size() < static_cast<size_t>(scaling_.amax_history_len)) return ring_;
  std::vector<float> h(ring_.begin() + next_, ring_.end());
  h.insert(h.end(), ring_.begin(), ring_.begin() + next_);
  return h;
}

void Fp8Slot::restore(const std::vector<float>& history) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto len = static_cast<size_t>(scaling_.amax_history_len);
  const size_t skip = history.size() > len ? history.size() - len : 0;
  ring_.assign(history.begin() + static_cast<std::ptrdiff_t>(skip), history.end());
  next_ = 0;
  seen_ = false;
  step_amax_ = 0.0f;
  recompute_scale();
}

void Fp8Slot::recompute_scale() {
  scale_ = fp8_scale_from_amax(history_amax(history_locked(), scaling_.amax_max), format_,
                               scaling_.margin);
}

// ---- Fp8State ---------------------------------------------------------------------------------

Fp8State::Fp8State(Fp8Scaling scaling) : scaling_(scaling) {}

std::shared_ptr<Fp8Slot> Fp8State::slot(const std::string& key, Fp8Role role,
                                        Fp8Format format) {
  const std::string name = key + "." + to_string(role);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slots_.find(name);
  if (it != slots_.end()) return it->second;
  auto made = std::make_shared<Fp8Slot>(format, scaling_);
  auto pending = pending_.find(name);
  if (pending != pending_.end()) {
    made->restore(pending->second);
    pending_.erase(pending);
  }
  slots_.emplace(name, made);
  return made;
}

void Fp8State::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : slots_) entry.second->end_step();
}

std::vector<float> Fp8State::step_amaxes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<float> out;
  out.reserve(slots_.size());
  for (const auto& entry : slots_) out.push_back(entry.second->step_amax());
  return out;
}

void Fp8State::set_step_amaxes(const std::vector<float>& amaxes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (amaxes.size() != slots_.size()) {
    throw std::invalid_argument("set_step_amaxes: " + std::to_string(amaxes.size()) +
                                " values for " + std::to_string(slots_.size()) + " slots");
  }
  size_t i = 0;
  for (auto& entry : slots_) {
    Fp8Slot& s = *entry.second;
    const float amax = amaxes[i++];
    if (amax != s.step_amax()) s.scale_for(torch::Tensor(), amax);
  }
}

std::map<std::string, torch::Tensor> Fp8State::to_tensors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, torch::Tensor> out;
  auto put = [&out](const std::string& name, const std::vector<float>& h, float scale) {
    out["fp8." + name + ".history"] =
        torch::tensor(h.empty() ? std::vector<float>{} : h, torch::kFloat).clone();
    out["fp8." + name + ".scale"] = torch::tensor({scale}, torch::kFloat);
  };
  for (const auto& entry : slots_) put(entry.first, entry.second->history(), entry.second->scale());
  for (const auto& entry : pending_) {
    Fp8Slot probe(Fp8Format::kE4M3, scaling_);
    probe.restore(entry.second);
    put(entry.first, probe.history(), NAN);  // a scale needs the slot's format: not made yet
  }
  return out;
}

void Fp8State::load(const std::map<std::string, torch::Tensor>& tensors,
                    const std::string& source) {
  std::map<std::string, std::vector<float>> loaded;
  const std::string prefix = "fp8.", suffix = ".history";
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - 6, 6, ".scale") == 0) continue;
    auto bad = [&](const std::string& why) {
      return CheckpointError(source + ": tensor '" + name + "' " + why +
                             "; the file is not a checkpoint of this run's FP8 state");
    };
    if (name.size() <= prefix.size() + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      throw bad("is not <module>.<role>.history");
    }
    const std::string slot = name.substr(prefix.size(), name.size() - prefix.size() -
                                                            suffix.size());
    const auto dot = slot.rfind('.');
    const std::string role = dot == std::string::npos ? "" : slot.substr(dot + 1);
    if (role != "input" && role != "weight" && role != "grad_output") {
      throw bad("names no role (input, weight or grad_output)");
    }
    const torch::Tensor& t = entry.second;
    if (t.scalar_type() != torch::kFloat || t.dim() != 1) throw bad("is not a 1-d fp32 tensor");
    const torch::Tensor c = t.contiguous().cpu();
    std::vector<float> h(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    for (float v : h) {
      // An overflowed step's amax is kept as inf or NaN (the delayed scale skips it).
      if (v < 0.0f) throw bad("holds a negative amax");
    }
    loaded.emplace(slot, std::move(h));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
  pending_ = std::move(loaded);
}

void Fp8State::set_observer(std::shared_ptr<const Fp8Observer> observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = std::move(observer);
}

std::shared_ptr<const Fp8Observer> Fp8State::observer() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return observer_;
}

}  // namespace amptune::amp
