#include "amp/fp8_gemm.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "amp/emulate.h"
#include "compat/torch_compat.h"

namespace amptune::amp {
namespace {

thread_local std::shared_ptr<Fp8State> t_state;
thread_local bool t_record = true;

// Qx / Qw: the fake quantisation forward, the identity backward.
class FakeQuant : public torch::autograd::Function<FakeQuant> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x,
                               double scale, int64_t format) {
    return fp8_fake_quantise(x, static_cast<float>(scale), static_cast<Fp8Format>(format));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

// What the backward pass of one Gq needs, captured at forward time (the autograd engine may run
// the backward on another thread, whose thread-locals are not this one's).
struct GradQuant {
  std::shared_ptr<Fp8Slot> slot;
  std::shared_ptr<const Fp8Observer> observer;
  std::string key;
  Fp8Format format = Fp8Format::kE5M2;
  bool record = true;
  bool delayed = true;
  float forward_scale = 1.0f;  // the delayed scale in force at the forward pass

  // The gradient of the op's output, fake-quantised (a hook on that output: the op's own
  // backward takes what this returns).
  torch::Tensor operator()(const torch::Tensor& g) const {
    if (!g.defined()) return g;
    torch::NoGradGuard no_grad;
    const torch::Tensor g32 = g.scalar_type() == torch::kFloat ? g : g.to(torch::kFloat);
    const float own = slot->scale_for(g32, -1.0f, record);  // (records the amax)
    const float scale = delayed ? forward_scale : own;
    if (observer) (*observer)(key, Fp8Role::kGradOutput, g32, scale, format);
    return fp8_fake_quantise(g32, scale, format).to(g.scalar_type());
  }
};

}  // namespace

Fp8Scaling fp8_scaling(const Fp8Policy& policy) {
  Fp8Scaling s;
  s.delayed = policy.delayed;
  s.margin = policy.margin;
  s.amax_history_len = policy.amax_history_len;
  s.amax_max = policy.amax_max;
  return s;
}

Fp8Format fp8_format(const Fp8Policy& policy, Fp8Role role) {
  return role == Fp8Role::kGradOutput && policy.hybrid ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}

ScopedFp8::ScopedFp8(std::shared_ptr<Fp8State> state, bool record)
    : previous_(t_state), previous_record_(t_record) {
  t_state = std::move(state);
  t_record = record;
}

ScopedFp8::~ScopedFp8() {
  t_state = previous_;
  t_record = previous_record_;
}

std::unique_ptr<Fp8Gemm> Fp8Gemm::begin() {
  const Policy* policy = current_policy();
  if (!policy || !policy->fp8.enabled) return nullptr;
  if (!t_state) {
    throw std::logic_error("an FP8 policy's forward pass without its FP8 state (ScopedFp8)");
  }
  std::optional<std::string> key = next_fp8_gemm_key();
  if (!key) return nullptr;
  return std::unique_ptr<Fp8Gemm>(new Fp8Gemm(std::move(*key), *policy, *t_state, t_record));
}

Fp8Gemm::Fp8Gemm(std::string key, const Policy& policy, Fp8State& state, bool record)
    : key_(std::move(key)), policy_(policy), state_(state), record_(record) {
  // The op runs in fp32 whatever autocast would pick (its output is cast afterwards).
  if (policy_.backend == Backend::kNative && policy_.patch_ops &&
      compat::autocast_enabled(policy_.on_cuda)) {
    autocast_paused_ = true;
    compat::set_autocast_enabled(policy_.on_cuda, false);
  }
}

Fp8Gemm::~Fp8Gemm() {
  if (autocast_paused_) compat::set_autocast_enabled(policy_.on_cuda, true);
}

torch::Tensor Fp8Gemm::base(const torch::Tensor& v) const {
  if (!v.defined() || !policy_.low_precision()) return v;
  if (policy_.backend == Backend::kEmulate) return round_through(v, policy_.dtype);
  // native: the value autocast (O1) or the cast model (O2/O3) gives the op, in fp32.
  const torch::ScalarType low = scalar_type(policy_.dtype);
  const torch::Tensor held = policy_.patch_ops && v.is_floating_point() ? v.to(low) : v;
  return held.to(torch::kFloat);
}

torch::Tensor Fp8Gemm::quantise(const torch::Tensor& v, Fp8Role role) {
  const torch::Tensor x = base(v);
  const Fp8Format format = fp8_format(policy_.fp8, role);
  const float scale = state_.slot(key_, role, format)->scale_for(x, -1.0f, record_);
  if (const auto observer = state_.observer()) (*observer)(key_, role, x, scale, format);
  return FakeQuant::apply(x, static_cast<double>(scale), static_cast<int64_t>(format));
}

torch::Tensor Fp8Gemm::input(const torch::Tensor& x) { return quantise(x, Fp8Role::kInput); }

torch::Tensor Fp8Gemm::weight(const torch::Tensor& w) { return quantise(w, Fp8Role::kWeight); }

torch::Tensor Fp8Gemm::bias(const torch::Tensor& b) const { return base(b); }

torch::Tensor Fp8Gemm::output(const torch::Tensor& y, const torch::Tensor& b,
                              int64_t channel_dim) const {
  torch::Tensor out = y;
  if (y.requires_grad()) {
    GradQuant gq;
    gq.format = fp8_format(policy_.fp8, Fp8Role::kGradOutput);
    gq.slot = state_.slot(key_, Fp8Role::kGradOutput, gq.format);
    gq.observer = state_.observer();
    gq.key = key_;
    gq.record = record_;
    gq.delayed = policy_.fp8.delayed;
    gq.forward_scale = gq.slot->scale();
    out.register_hook(std::move(gq));
  }
  if (b.defined()) {
    if (channel_dim == -1 || channel_dim == out.dim() - 1) {
      out = out + b;
    } else {
      std::vector<int64_t> shape(static_cast<size_t>(out.dim()), 1);
      shape[static_cast<size_t>(channel_dim)] = -1;
      out = out + b.view(shape);
    }
  }
  if (!policy_.low_precision()) return out;
  if (policy_.backend == Backend::kEmulate) return round_through(out, policy_.dtype);
  return out.to(scalar_type(policy_.dtype));
}

torch::Tensor Fp8Gemm::run(
    const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& op,
    int64_t channel_dim) {
  const torch::Tensor qx = input(x);
  const torch::Tensor qw = weight(w);
  return output(op(qx, qw), bias(b), channel_dim);
}

}  // namespace amptune::amp
