#include "amp/fp8_gemm.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "amp/emulate.h"
#include "compat/torch_compat.h"
#include "core/error.h"

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

  // The scale the gradient `g32` (fp32) is quantised with; its amax recorded, the observer told.
  float scale_of(const torch::Tensor& g32) const {
    const float own = slot->scale_for(g32, -1.0f, record);
    const float scale = delayed ? forward_scale : own;
    if (observer) (*observer)(key, Fp8Role::kGradOutput, g32, scale, format);
    return scale;
  }

  // The gradient of the op's output, fake-quantised (a hook on that output: the op's own
  // backward takes what this returns).
  torch::Tensor operator()(const torch::Tensor& g) const {
    if (!g.defined()) return g;
    torch::NoGradGuard no_grad;
    const torch::Tensor g32 = g.scalar_type() == torch::kFloat ? g : g.to(torch::kFloat);
    return fp8_fake_quantise(g32, scale_of(g32), format).to(g.scalar_type());
  }
};

// The Gq of GEMM `key` under `policy`, made at its forward pass.
GradQuant grad_quant(const Fp8Policy& policy, Fp8State& state, const std::string& key,
                     bool record) {
  GradQuant gq;
  gq.format = fp8_format(policy, Fp8Role::kGradOutput);
  gq.slot = state.slot(key, Fp8Role::kGradOutput, gq.format);
  gq.observer = state.observer();
  gq.key = key;
  gq.record = record;
  gq.delayed = policy.delayed;
  gq.forward_scale = gq.slot->scale();
  return gq;
}

// --- amp.fp8.gemm scaled_mm: a Linear's three GEMMs through torch._scaled_mm ---

// Zeros that bring a dimension of n to a multiple of 16, at least 16 (an empty batch's product
// runs on 16 rows of zeros and is cut back to none).
int64_t pad16(int64_t n) { return n == 0 ? 16 : (16 - n % 16) % 16; }

// A 2-D operand of _scaled_mm: the fp8 values of v * scale as a float8 tensor - PyTorch's cast
// of the clamped product, which is fp8_quantise's rounding bit for bit (amp/fp8.h) in one
// kernel on any device - rows and columns padded with zeros to non-zero multiples of 16 (what the
// CUDA kernels take; zeros add nothing to a product, the padding is cut from the result).
torch::Tensor fp8_operand(const torch::Tensor& v, float scale, Fp8Format format) {
  const double max = fp8_max(format);
  torch::Tensor q = (v.to(torch::kFloat) * scale).clamp_(-max, max);
  const int64_t rows = pad16(q.size(0)), cols = pad16(q.size(1));
  if (rows > 0 || cols > 0) q = torch::constant_pad_nd(q, {0, cols, 0, rows});
  return compat::to_float8(q, format == Fp8Format::kE4M3);
}

// a (r, k) times b (c, k) transposed, both padded operands quantised with scales sa and sb:
// the fp32 (rows, cols) product of the values they stand for (_scaled_mm multiplies 1/sa and
// 1/sb into its fp32 accumulator; its second operand column-major, which b^T is).
torch::Tensor mm_nt(const torch::Tensor& a, const torch::Tensor& b, float sa, float sb,
                    int64_t rows, int64_t cols) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(a.device());
  const torch::Tensor y = compat::scaled_mm(a, b.t(), torch::full({}, 1.0f / sa, opts),
                                            torch::full({}, 1.0f / sb, opts));
  return y.narrow(0, 0, rows).narrow(1, 0, cols);
}

// What one scaled_mm Linear hands its backward pass (held in the autograd context).
struct ScaledMmGemm : torch::CustomClassHolder {
  GradQuant grad;
  float sx = 1.0f, sw = 1.0f;  // the scales of input and weight
  int64_t m = 0, n = 0, k = 0;  // x (m, k), w (n, k), y (m, n)
};

// y = x w^T from fp8 operands; backward: the gradient quantised (grad_output slot), then
// dgrad = g w and wgrad = g^T x from the fp8 operands saved at the forward pass (one byte per
// value, as Transformer Engine keeps them).
class ScaledMmLinear : public torch::autograd::Function<ScaledMmLinear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, const c10::intrusive_ptr<ScaledMmGemm>& g,
                               int64_t x_format, int64_t w_format) {
    const torch::Tensor x8 = fp8_operand(x, g->sx, static_cast<Fp8Format>(x_format));
    const torch::Tensor w8 = fp8_operand(w, g->sw, static_cast<Fp8Format>(w_format));
    ctx->save_for_backward({x8, w8});
    ctx->saved_data["gemm"] = c10::IValue::make_capsule(g);
    return mm_nt(x8, w8, g->sx, g->sw, g->m, g->n);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto g = c10::static_intrusive_pointer_cast<ScaledMmGemm>(
        ctx->saved_data["gemm"].toCapsule());
    const torch::Tensor& gy = grads[0];
    if (!gy.defined()) return {torch::Tensor(), torch::Tensor(), {}, {}, {}};
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor g32 = gy.to(torch::kFloat);
    const float sg = g->grad.scale_of(g32);
    const torch::Tensor g8 = fp8_operand(g32, sg, g->grad.format);
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      dx = mm_nt(g8, saved[1].t().contiguous(), sg, g->sw, g->m, g->k);
    }
    if (ctx->needs_input_grad(1)) {
      dw = mm_nt(g8.t().contiguous(), saved[0].t().contiguous(), sg, g->sx, g->n, g->k);
    }
    return {dx, dw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The way out of a refused amp.fp8.gemm scaled_mm.
const char* const kEmulateInstead = "; use amp.fp8.gemm: emulate (the same recipe on fp32 kernels)";

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

float Fp8Gemm::scale_of(const torch::Tensor& x, Fp8Role role) {
  const Fp8Format format = fp8_format(policy_.fp8, role);
  const float scale = state_.slot(key_, role, format)->scale_for(x, -1.0f, record_);
  if (const auto observer = state_.observer()) (*observer)(key_, role, x, scale, format);
  return scale;
}

torch::Tensor Fp8Gemm::quantise(const torch::Tensor& v, Fp8Role role) {
  const torch::Tensor x = base(v);
  const float scale = scale_of(x, role);
  const auto format = static_cast<int64_t>(fp8_format(policy_.fp8, role));
  return FakeQuant::apply(x, static_cast<double>(scale), format);
}

torch::Tensor Fp8Gemm::input(const torch::Tensor& x) { return quantise(x, Fp8Role::kInput); }

torch::Tensor Fp8Gemm::weight(const torch::Tensor& w) { return quantise(w, Fp8Role::kWeight); }

torch::Tensor Fp8Gemm::bias(const torch::Tensor& b) const { return base(b); }

torch::Tensor Fp8Gemm::output(const torch::Tensor& y, const torch::Tensor& b,
                              int64_t channel_dim) const {
  torch::Tensor out = y;
  if (y.requires_grad()) out.register_hook(grad_quant(policy_.fp8, state_, key_, record_));
  return finish(out, b, channel_dim);
}

torch::Tensor Fp8Gemm::finish(const torch::Tensor& y, const torch::Tensor& b,
                              int64_t channel_dim) const {
  torch::Tensor out = y;
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

bool Fp8Gemm::by_scaled_mm() const { return policy_.fp8.scaled_mm; }

torch::Tensor Fp8Gemm::linear(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b) {
  if (!by_scaled_mm()) {
    return run(
        x, w, b, [](const torch::Tensor& a, const torch::Tensor& v) { return torch::linear(a, v); },
        -1);
  }
  const torch::Tensor xb = base(x), wb = base(w);
  auto gemm = c10::make_intrusive<ScaledMmGemm>();
  gemm->sx = scale_of(xb, Fp8Role::kInput);
  gemm->sw = scale_of(wb, Fp8Role::kWeight);
  gemm->grad = grad_quant(policy_.fp8, state_, key_, record_);
  const torch::Tensor x2 = xb.reshape({-1, xb.size(-1)});
  gemm->m = x2.size(0);
  gemm->n = wb.size(0);
  gemm->k = wb.size(1);
  std::vector<int64_t> shape = xb.sizes().vec();
  shape.back() = gemm->n;
  const torch::Tensor y = ScaledMmLinear::apply(
      x2, wb, gemm, static_cast<int64_t>(fp8_format(policy_.fp8, Fp8Role::kInput)),
      static_cast<int64_t>(fp8_format(policy_.fp8, Fp8Role::kWeight)));
  return finish(y.view(shape), bias(b), -1);
}

bool scaled_mm_built() { return compat::kHasScaledMm; }

void check_scaled_mm_build() {
  if (scaled_mm_built()) return;
  throw ConfigError("amp.fp8.gemm is scaled_mm but this build's LibTorch (" +
                    std::string(TORCH_VERSION) + ") has no torch._scaled_mm (2.5 or later)" +
                    kEmulateInstead);
}

void check_scaled_mm(const torch::Device& device) {
  check_scaled_mm_build();
  try {
    torch::NoGradGuard no_grad;
    const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
    const torch::Tensor a = fp8_operand(torch::ones({16, 16}, opts), 1.0f, Fp8Format::kE4M3);
    const torch::Tensor b = fp8_operand(torch::ones({16, 16}, opts), 1.0f, Fp8Format::kE5M2);
    const float got = mm_nt(a, b, 1.0f, 1.0f, 16, 16)[0][0].item<float>();
    if (got != 16.0f) throw std::runtime_error("a product of ones gave " + std::to_string(got));
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw ConfigError("amp.fp8.gemm is scaled_mm but torch._scaled_mm does not run on " +
                      device.str() + " (" + what + ")" + kEmulateInstead);
  }
}

}  // namespace amptune::amp
