#include "amp/fp8.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>

#include "core/error.h"

namespace amptune::amp {
namespace {

struct Layout {
  int mantissa_bits;  // 3 | 2
  int min_exponent;   // of a normal value: -6 | -14
  float max;
  float min_normal;   // 2^min_exponent
  float magic;        // 2^(min_exponent - mantissa_bits + 23): see round_one
};

constexpr Layout layout(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? Layout{3, -6, 448.0f, 0x1p-6f, 0x1p14f}
                                    : Layout{2, -14, 57344.0f, 0x1p-14f, 0x1p7f};
}

// One value, branch-free (no data-dependent branch in the loop below; GCC 12 at -O2 emits scalar
// selects, not vector code: docs/PERFORMANCE.md "FP8 emulation"): |x| rounded both ways and the
// right one selected. Normal range: keep `mantissa_bits` of fp32's 23, round to nearest even on the
// bits dropped (a carry into the exponent is the right answer; near FLT_MAX and for inf it reaches
// inf, which saturates). Subnormal range: adding and subtracting 2^(min_exponent - mantissa_bits +
// 23) leaves |x| rounded (ties to even, fp32's own rounding) to a multiple of the smallest
// subnormal. Beyond max: max. NaN: x.
inline float round_one(float x, const Layout& l) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t abits = bits & 0x7FFFFFFFu;
  float a;
  std::memcpy(&a, &abits, sizeof a);
  const int drop = 23 - l.mantissa_bits;
  const uint32_t nbits =
      (abits + ((1u << (drop - 1)) - 1u) + ((abits >> drop) & 1u)) & ~((1u << drop) - 1u);
  float normal;
  std::memcpy(&normal, &nbits, sizeof normal);
  const float subnormal = (a + l.magic) - l.magic;
  float r = a < l.min_normal ? subnormal : normal;
  r = r > l.max ? l.max : r;
  uint32_t rbits;
  std::memcpy(&rbits, &r, sizeof rbits);
  rbits |= sign;
  float out;
  std::memcpy(&out, &rbits, sizeof out);
  return abits > 0x7F800000u ? x : out;
}

// The loop, compiled for AVX2 where the CPU has it (the same arithmetic, so the same bits).
// With scale != 1: round(x * scale) * inv, each product in fp32 as the unfused ops compute it.
template <Fp8Format F>
inline void round_loop(const float* src, float* dst, int64_t n, float scale, float inv) {
  constexpr Layout l = layout(F);
  if (scale == 1.0f && inv == 1.0f) {
    for (int64_t i = 0; i < n; ++i) dst[i] = round_one(src[i], l);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = round_one(src[i] * scale, l) * inv;
  }
}
#if defined(__x86_64__) && defined(__GNUC__)
// round_loop inlined into a function compiled for AVX2.
template <Fp8Format F>
__attribute__((target("avx2"), flatten)) void round_loop_avx2(const float* src, float* dst,
                                                              int64_t n, float scale, float inv) {
  round_loop<F>(src, dst, n, scale, inv);
}
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

template <Fp8Format F>
void round_any(const float* src, float* dst, int64_t n, float scale, float inv) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) return round_loop_avx2<F>(src, dst, n, scale, inv);
#endif
  round_loop<F>(src, dst, n, scale, inv);
}

void round_scaled(const float* src, float* dst, int64_t n, Fp8Format format, float scale,
                  float inv) {
  if (format == Fp8Format::kE4M3) return round_any<Fp8Format::kE4M3>(src, dst, n, scale, inv);
  round_any<Fp8Format::kE5M2>(src, dst, n, scale, inv);
}

// A CPU fp32 tensor through round_scaled, in parallel (a new tensor).
torch::Tensor round_cpu(const torch::Tensor& x, Fp8Format format, float scale, float inv) {
  const torch::Tensor src = x.contiguous();
  torch::Tensor out = torch::empty_like(src);
  const float* in = src.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, src.numel(), 32768, [&](int64_t begin, int64_t end) {
    round_scaled(in + begin, o + begin, end - begin, format, scale, inv);
  });
  return out;
}

void check_fp32(const torch::Tensor& x, const char* what) {
  if (x.scalar_type() != torch::kFloat) {
    throw std::invalid_argument(std::string(what) + " takes fp32 tensors");
  }
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
  round_scaled(src, dst, n, format, 1.0f, 1.0f);
}

torch::Tensor round_to_fp8(const torch::Tensor& x, Fp8Format format) {
  check_fp32(x, "round_to_fp8");
  if (!x.device().is_cpu()) return round_to_fp8_ops(x, format);
  return round_cpu(x, format, 1.0f, 1.0f);
}

float fp8_amax(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  if (x.numel() == 0) return 0.0f;
  const auto mm = torch::aminmax(x);
  const float lo = std::get<0>(mm).item<float>(), hi = std::get<1>(mm).item<float>();
  if (std::isnan(lo) || std::isnan(hi)) return NAN;
  return std::max(-lo, hi);
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
  check_fp32(x, "fp8_quantise");
  if (!x.device().is_cpu()) return round_to_fp8_ops(x * scale, format);
  return round_cpu(x, format, scale, 1.0f);
}

torch::Tensor fp8_fake_quantise(const torch::Tensor& x, float scale, Fp8Format format) {
  torch::NoGradGuard no_grad;
  check_fp32(x, "fp8_fake_quantise");
  const float inv = 1.0f / scale;
  if (!x.device().is_cpu()) return round_to_fp8_ops(x * scale, format) * inv;
  return round_cpu(x, format, scale, inv);
}

// ---- Fp8Slot ----------------------------------------------------------------------------------

Fp8Slot::Fp8Slot(Fp8Format format, const Fp8Scaling& scaling)
    : format_(format), scaling_(scaling) {}

float Fp8Slot::scale_for(const torch::Tensor& x, float amax, bool record) {
  if (amax < 0.0f) amax = fp8_amax(x);
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
  std::lock_guard<std::mutex> lock(mutex_);
  return slot_locked(key + "." + to_string(role), format);
}

std::shared_ptr<Fp8Slot> Fp8State::slot_locked(const std::string& name, Fp8Format format) {
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

std::vector<std::string> Fp8State::slot_list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  out.reserve(slots_.size());
  for (const auto& [name, slot] : slots_) {
    out.push_back(name + "\t" + to_string(slot->format()));
  }
  return out;
}

void Fp8State::add_slots(const std::vector<std::string>& list) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& entry : list) {
    const auto tab = entry.rfind('\t');
    const std::string word = tab == std::string::npos ? "" : entry.substr(tab + 1);
    std::optional<Fp8Format> format;
    for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      if (word == to_string(f)) format = f;
    }
    if (tab == 0 || !format) {
      throw std::invalid_argument("add_slots: \"" + entry + "\" is not <key>.<role>\\t<format>");
    }
    slot_locked(entry.substr(0, tab), *format);
  }
}

size_t Fp8State::slot_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_.size();
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
    constexpr Fp8Role kRoles[] = {Fp8Role::kInput, Fp8Role::kWeight, Fp8Role::kGradOutput};
    if (std::none_of(std::begin(kRoles), std::end(kRoles),
                     [&](Fp8Role r) { return role == to_string(r); })) {
      throw bad(std::string("names no role (") + to_string(Fp8Role::kInput) + ", " +
                to_string(Fp8Role::kWeight) + " or " + to_string(Fp8Role::kGradOutput) + ")");
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
