#include "amp/emulate.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <fnmatch.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>

#include "amp/fp8_gemm.h"
#include "amp/module_marks.h"
#include "amp/op_emulation.h"
#include "compat/torch_compat.h"
#include "core/error.h"

namespace amptune::amp {
namespace {

thread_local std::shared_ptr<const Policy> t_policy;
thread_local std::shared_ptr<const ModuleMap> t_modules;
thread_local std::shared_ptr<const Observer> t_observer;
thread_local int t_fp32_depth = 0;  // open fp32 regions (ModuleCall of a marked module)
thread_local int t_marked_depth = 0;  // open ModuleCalls of marked modules, under any policy
thread_local ModuleCall* t_innermost = nullptr;  // the innermost known module call

// Fused rounding kernels over contiguous float arrays (src and dst may alias).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) void round_fp16(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(c10::Half(src[i]));
}
bool fused_rounding_available(Dtype dtype) {
  static const bool f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return dtype == Dtype::kBf16 || f16c;
}
#else
void round_fp16(const float*, float*, int64_t) {}
bool fused_rounding_available(Dtype dtype) { return dtype == Dtype::kBf16; }
#endif

// bf16 keeps the top 16 bits of a float: round to nearest even on bit 16; NaN stays NaN.
void round_bf16(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof bits);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    const uint32_t out = src[i] != src[i] ? 0x7FC00000u : rounded;
    std::memcpy(dst + i, &out, sizeof out);
  }
}

torch::ScalarType low_type(Dtype dtype) {
  return dtype == Dtype::kFp16 ? torch::kHalf : torch::kBFloat16;
}

// Whether the fused kernels can round x: a dense CPU float tensor (NCHW or channels_last:
// empty_like keeps its strides, so element k of the buffer maps to element k).
bool fused(const torch::Tensor& x, Dtype dtype) {
  return x.scalar_type() == torch::kFloat && x.device().is_cpu() &&
         x.is_non_overlapping_and_dense() && fused_rounding_available(dtype);
}

// dst = round(src); dst is src itself or an empty_like(src) (same strides).
void round_into(const torch::Tensor& src, const torch::Tensor& dst, Dtype dtype) {
  torch::NoGradGuard no_grad;
  if (!fused(src, dtype)) {
    dst.copy_(src.to(low_type(dtype)).to(src.scalar_type()));
    return;
  }
  // One pass, no temporary; the same round-to-nearest-even (tested elementwise against
  // Tensor::to).
  const float* in = src.data_ptr<float>();
  float* out = dst.data_ptr<float>();
  at::parallel_for(0, src.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    if (dtype == Dtype::kFp16) {
      round_fp16(in + begin, out + begin, end - begin);
    } else {
      round_bf16(in + begin, out + begin, end - begin);
    }
  });
}

// ---- values known to be on the grid ------------------------------------------------------
// The last few tensors known to hold grid values: outputs of a rounding, what relu / max-pool
// make of them, and the gradients the roundings hand back (and relu's backward makes of them).
// Rounding is idempotent, so skipping the rounding of such a value is exact. A tag holds a weak
// reference, which keeps the TensorImpl's memory allocated (no other tensor can take its address
// while the tag lives), and the version counter at tagging: any in-place change voids it
// (autograd accumulates a second gradient in place, add_, which bumps the version). A tensor
// that fell out of the ring is just rounded again.
struct GridTag {
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;
  int64_t version;
  Dtype dtype;
};
constexpr size_t kGridTags = 16;
thread_local std::vector<GridTag> t_grid;
thread_local size_t t_grid_next = 0;

bool on_grid(const torch::Tensor& x, Dtype dtype) {
  if (!x.defined() || x.is_inference()) return false;  // (no version counter)
  const c10::TensorImpl* impl = x.unsafeGetTensorImpl();
  for (const auto& tag : t_grid) {
    if (tag.impl._unsafe_get_target() == impl) {
      return tag.dtype == dtype && tag.version == x._version();
    }
  }
  return false;
}

void tag_grid(const torch::Tensor& x, Dtype dtype) {
  if (!x.defined() || x.is_inference()) return;
  GridTag tag{c10::weak_intrusive_ptr<c10::TensorImpl>(x.getIntrusivePtr()), x._version(), dtype};
  for (auto& old : t_grid) {  // a tensor re-tagged (a newer version) keeps one slot
    if (old.impl._unsafe_get_target() == x.unsafeGetTensorImpl()) {
      old = std::move(tag);
      return;
    }
  }
  if (t_grid.size() < kGridTags) {
    t_grid.push_back(std::move(tag));
  } else {
    t_grid[t_grid_next] = std::move(tag);
    t_grid_next = (t_grid_next + 1) % kGridTags;
  }
}

// The gradient of a low-precision value: rounded, unless known to be on the grid already.
torch::Tensor round_grad(const torch::Tensor& g, Dtype dtype) {
  if (!g.defined() || on_grid(g, dtype)) return g;
  torch::Tensor out = round_to_grid(g, dtype);
  tag_grid(out, dtype);
  return out;
}

// Rounds the value (in place when `in_place`: x is an op's fresh output that no backward reads)
// and the gradient flowing back. A value on the grid already is passed on as it is (its
// gradient is still rounded).
class RoundThrough : public torch::autograd::Function<RoundThrough> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               int64_t dtype, bool in_place) {
    ctx->saved_data["dtype"] = dtype;
    const auto d = static_cast<Dtype>(dtype);
    if (on_grid(x, d)) return x;
    if (!in_place) return round_to_grid(x, d);
    round_into(x, x, d);
    ctx->mark_dirty({x});
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto dtype = static_cast<Dtype>(ctx->saved_data["dtype"].toInt());
    return {round_grad(grads[0], dtype), torch::Tensor(), torch::Tensor()};
  }
};

// torch::relu whose gradient stays known to be on the grid when the incoming one is (relu's
// backward, threshold_backward(grad, result, 0) as autograd's own, only zeroes elements).
class GridRelu : public torch::autograd::Function<GridRelu> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               int64_t dtype) {
    ctx->saved_data["dtype"] = dtype;
    torch::Tensor r = torch::relu(x);
    ctx->save_for_backward({r});
    return r;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto dtype = static_cast<Dtype>(ctx->saved_data["dtype"].toInt());
    const torch::Tensor& g = grads[0];
    torch::Tensor gx = at::threshold_backward(g, ctx->get_saved_variables()[0], 0);
    if (on_grid(g, dtype)) tag_grid(gx, dtype);
    return {gx, torch::Tensor()};
  }
};

torch::Tensor round_through_impl(const torch::Tensor& x, Dtype dtype, bool in_place) {
  // In place only where autograd allows it and nothing else reads x: not a view, not a leaf.
  in_place = in_place && !x.is_view() && !(x.is_leaf() && x.requires_grad());
  torch::Tensor y = RoundThrough::apply(x, static_cast<int64_t>(dtype), in_place);
  tag_grid(y, dtype);
  return y;
}

// Rounds when emulating: a value the device holds in low precision.
torch::Tensor low(const torch::Tensor& x) {
  if (!x.defined()) return x;
  return round_through(x, t_policy->dtype);
}
// The same for an op's fresh output (amp/emulate.h input_dtype_op_).
torch::Tensor low_(const torch::Tensor& x) {
  if (!x.defined()) return x;
  return round_through_impl(x, t_policy->dtype, /*in_place=*/true);
}

using compat::alternative;

bool fp8_policy() { return t_policy && t_policy->fp8.enabled; }

std::vector<int64_t> padding2d(const torch::nn::detail::conv_padding_t<2>& padding,
                               const char* what) {
  if (const auto* p = alternative<torch::ExpandingArray<2>>(padding)) {
    return at::IntArrayRef(*p).vec();
  }
  throw ModelError(std::string(what) +
                   " with padding kValid/kSame has no emulated low-precision path; give the "
                   "padding as numbers");
}

}  // namespace

torch::ScalarType scalar_type(Dtype dtype) { return low_type(dtype); }

torch::Tensor round_to_grid(const torch::Tensor& x, Dtype dtype) {
  torch::NoGradGuard no_grad;
  if (!fused(x, dtype)) return x.to(low_type(dtype)).to(x.scalar_type());
  torch::Tensor out = torch::empty_like(x);
  round_into(x, out, dtype);
  return out;
}

torch::Tensor round_through(const torch::Tensor& x, Dtype dtype) {
  return round_through_impl(x, dtype, /*in_place=*/false);
}

ScopedPolicy::ScopedPolicy(const Policy& policy) : previous_(t_policy) {
  t_policy = std::make_shared<const Policy>(policy);
}
ScopedPolicy::~ScopedPolicy() { t_policy = previous_; }

const Policy* current_policy() { return t_policy.get(); }

bool emulating() {
  return t_policy && t_policy->backend == Backend::kEmulate && t_policy->low_precision() &&
         t_fp32_depth == 0;
}

torch::Tensor conv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& in) {
  ModuleCall call(conv);
  const torch::Tensor x = call.input(in);
  const auto& o = conv.options;
  if (auto fp8 = Fp8Gemm::begin()) {
    if (!alternative<torch::enumtype::kZeros>(o.padding_mode())) {
      throw ModelError("Conv2d with a padding_mode other than zeros has no FP8 path");
    }
    const auto padding = padding2d(o.padding(), "Conv2d");
    return call.output(fp8->run(
        x, conv.weight, conv.bias,
        [&](const torch::Tensor& a, const torch::Tensor& w) {
          return torch::conv2d(a, w, {}, o.stride(), padding, o.dilation(), o.groups());
        },
        1));
  }
  if (!emulating()) return call.output(conv.forward(x));
  if (!alternative<torch::enumtype::kZeros>(o.padding_mode())) {
    throw ModelError("Conv2d with a padding_mode other than zeros has no emulated path");
  }
  auto y = torch::conv2d(low(x), low(conv.weight), low(conv.bias), o.stride(),
                         padding2d(o.padding(), "Conv2d"), o.dilation(), o.groups());
  return call.output(low_(y));  // a fresh output no backward reads
}

torch::Tensor conv_transpose2d(torch::nn::ConvTranspose2dImpl& conv, const torch::Tensor& in) {
  ModuleCall call(conv);
  const torch::Tensor x = call.input(in);
  const auto& o = conv.options;
  if (!alternative<torch::enumtype::kZeros>(o.padding_mode()) && (emulating() || fp8_policy())) {
    throw ModelError("ConvTranspose2d with a padding_mode other than zeros has no emulated path");
  }
  if (auto fp8 = Fp8Gemm::begin()) {
    const auto padding = padding2d(o.padding(), "ConvTranspose2d");
    return call.output(fp8->run(
        x, conv.weight, conv.bias,
        [&](const torch::Tensor& a, const torch::Tensor& w) {
          return torch::conv_transpose2d(a, w, {}, o.stride(), padding, o.output_padding(),
                                         o.groups(), o.dilation());
        },
        1));
  }
  if (!emulating()) return call.output(conv.forward(x));
  auto y = torch::conv_transpose2d(low(x), low(conv.weight), low(conv.bias), o.stride(),
                                   padding2d(o.padding(), "ConvTranspose2d"),
                                   o.output_padding(), o.groups(), o.dilation());
  return call.output(low_(y));
}

torch::Tensor linear(torch::nn::LinearImpl& linear, const torch::Tensor& in) {
  ModuleCall call(linear);
  const torch::Tensor x = call.input(in);
  if (auto fp8 = Fp8Gemm::begin()) return call.output(fp8->linear(x, linear.weight, linear.bias));
  if (!emulating()) return call.output(linear.forward(x));
  return call.output(low_(torch::linear(low(x), low(linear.weight), low(linear.bias))));
}

torch::Tensor input_dtype_op(const torch::Tensor& y, bool fp32_input) {
  if (!emulating() || (fp32_input && !t_policy->cast_model)) return y;
  return low(y);
}

torch::Tensor input_dtype_op_(const torch::Tensor& y, bool fp32_input) {
  if (!emulating() || (fp32_input && !t_policy->cast_model)) return y;
  return low_(y);
}

torch::Tensor relu(const torch::Tensor& x) {
  if (!emulating() || !on_grid(x, t_policy->dtype)) return torch::relu(x);
  torch::Tensor r = GridRelu::apply(x, static_cast<int64_t>(t_policy->dtype));
  tag_grid(r, t_policy->dtype);
  return r;
}

torch::Tensor keeps_grid(const torch::Tensor& out, const torch::Tensor& in) {
  if (emulating() && on_grid(in, t_policy->dtype)) tag_grid(out, t_policy->dtype);
  return out;
}

torch::Tensor fp32_op(const torch::Tensor& y) {
  return emulating() && t_policy->cast_model ? low(y) : y;
}

torch::Tensor model_input(const torch::Tensor& x) {
  if (!t_policy || !t_policy->cast_model || t_fp32_depth > 0) return x;
  if (t_policy->backend == Backend::kEmulate) {
    torch::Tensor y = low(x);
    mark_low(y);  // a graph's ops see a low-precision input (amp/op_emulation.h)
    return y;
  }
  if (t_policy->backend == Backend::kNative && x.is_floating_point()) {
    return x.to(scalar_type(t_policy->dtype));
  }
  return x;
}

torch::Tensor model_output(const torch::Tensor& y) {
  if (t_policy && t_policy->cast_model && t_policy->backend == Backend::kNative &&
      y.is_floating_point()) {
    return y.to(torch::kFloat);
  }
  return y;
}

// ---- native autocast: compat/torch_compat.h ------------------------------------------------
using compat::autocast_dtype;
using compat::autocast_enabled;
using compat::set_autocast_dtype;
using compat::set_autocast_enabled;

// ---- modules in fp32, observation ----------------------------------------------------------

ModuleMap::ModuleMap(const torch::nn::Module& model, const std::vector<std::string>& fp32_globs,
                     const std::vector<std::string>& fp8_skip_globs) {
  std::unordered_set<std::string> marked, skipped;  // names of marked / FP8-skipped modules
  auto matches = [&](const std::vector<std::string>& globs, const std::string& name) {
    for (const auto& glob : globs) {
      if (fnmatch(glob.c_str(), name.c_str(), 0) == 0) return true;
    }
    return false;
  };
  auto add = [&](const torch::nn::Module* m, const std::string& name, const std::string& parent) {
    const bool has_parent = m != &model;
    Entry e{name, (has_parent && marked.count(parent) > 0) || matches(fp32_globs, name),
            (has_parent && skipped.count(parent) > 0) || matches(fp8_skip_globs, name)};
    if (e.fp8_skip) skipped.insert(name);
    if (e.fp32) {
      marked.insert(name);
      for (const auto& p : m->parameters(/*recurse=*/false)) {
        fp32_tensors_.insert(p.unsafeGetTensorImpl());
      }
      for (const auto& b : m->buffers(/*recurse=*/false)) {
        fp32_tensors_.insert(b.unsafeGetTensorImpl());
      }
    }
    entries_[m] = e;
    order_.push_back(m);
  };
  add(&model, "", "");
  // named_modules lists parents before their children, so a parent's mark is known first.
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    const auto dot = name.rfind('.');
    add(item.value().get(), name, dot == std::string::npos ? "" : name.substr(0, dot));
  }
  check_module_globs(names(), fp32_globs);
  check_module_globs(names(), fp8_skip_globs, "amp.fp8.skip_modules");
}

void check_module_globs(const std::vector<std::string>& names,
                        const std::vector<std::string>& globs, const std::string& key) {
  for (const auto& glob : globs) {
    bool used = false;
    for (const auto& name : names) used = used || fnmatch(glob.c_str(), name.c_str(), 0) == 0;
    if (used) continue;
    std::string examples;
    for (size_t i = 1; i < names.size() && i < 8; ++i) examples += (i > 1 ? ", " : "") + names[i];
    throw ConfigError(key + ": '" + glob +
                      "' matches no module of this model (names look like " + examples +
                      "; `amptune diagnose` lists them all)");
  }
}

const ModuleMap::Entry* ModuleMap::find(const torch::nn::Module& module) const {
  auto it = entries_.find(&module);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> ModuleMap::names() const {
  std::vector<std::string> out;
  out.reserve(order_.size());
  for (const auto* m : order_) out.push_back(entries_.at(m).name);
  return out;
}

ScopedModules::ScopedModules(std::shared_ptr<const ModuleMap> modules) : previous_(t_modules) {
  t_modules = std::move(modules);
}
ScopedModules::~ScopedModules() { t_modules = previous_; }

ScopedObserver::ScopedObserver(Observer observer) : previous_(t_observer) {
  t_observer = std::make_shared<const Observer>(std::move(observer));
}
ScopedObserver::~ScopedObserver() { t_observer = previous_; }

ModuleCall::ModuleCall(const torch::nn::Module& module) {
  if (!t_modules) return;
  entry_ = t_modules->find(module);
  if (entry_) {
    outer_ = t_innermost;
    t_innermost = this;
  }
  if (entry_ && entry_->fp32) ++t_marked_depth;
  if (!entry_ || !entry_->fp32 || t_fp32_depth > 0 || !t_policy || !t_policy->low_precision()) {
    return;
  }
  region_ = true;
  ++t_fp32_depth;
  if (t_policy->backend == Backend::kNative && t_policy->patch_ops &&
      autocast_enabled(t_policy->on_cuda)) {
    autocast_paused_ = true;
    set_autocast_enabled(t_policy->on_cuda, false);
  }
}

ModuleCall::~ModuleCall() {
  if (entry_) t_innermost = outer_;
  if (entry_ && entry_->fp32) --t_marked_depth;
  if (!region_) return;
  --t_fp32_depth;
  if (autocast_paused_) set_autocast_enabled(t_policy->on_cuda, true);
}

torch::Tensor ModuleCall::input(const torch::Tensor& x) {
  if (t_observer && entry_) input_ = x;
  if (region_ && t_policy->backend == Backend::kNative && x.is_floating_point()) {
    return x.to(torch::kFloat);
  }
  return x;
}

torch::Tensor ModuleCall::output(const torch::Tensor& y) const {
  torch::Tensor out = y;
  if (region_ && t_policy->cast_model && y.is_floating_point() && !entry_->name.empty()) {
    // Back to the model's type for the low-precision layers that follow (the whole model's
    // output is the model's fp32 output).
    out = t_policy->backend == Backend::kNative ? y.to(scalar_type(t_policy->dtype))
                                                : round_through(y, t_policy->dtype);
    mark_low(out);
  }
  if (t_observer && entry_) (*t_observer)(entry_->name, input_, out);
  return out;
}

bool in_marked_module() { return t_marked_depth > 0; }

std::optional<std::string> next_fp8_gemm_key() {
  ModuleCall* call = t_innermost;
  if (!call) {
    throw std::logic_error("an FP8 GEMM outside any module call of the installed module map");
  }
  if (t_fp32_depth > 0 || call->entry_->fp32 || call->entry_->fp8_skip) return std::nullopt;
  const int k = call->fp8_gemms_++;
  return k == 0 ? call->entry_->name : call->entry_->name + "#" + std::to_string(k);
}

bool fp32_module(const torch::nn::Module& module) {
  if (t_fp32_depth > 0) return true;
  const ModuleMap::Entry* e = t_modules ? t_modules->find(module) : nullptr;
  return e && e->fp32;
}

AutocastGuard::AutocastGuard(const Policy& policy) {
  if (policy.backend != Backend::kNative || !policy.patch_ops) return;
  active_ = true;
  cuda_ = policy.on_cuda;
  prev_enabled_ = autocast_enabled(cuda_);
  prev_dtype_ = autocast_dtype(cuda_);
  set_autocast_dtype(cuda_, scalar_type(policy.dtype));
  set_autocast_enabled(cuda_, true);
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  set_autocast_enabled(cuda_, prev_enabled_);
  set_autocast_dtype(cuda_, prev_dtype_);
  at::autocast::clear_cache();
}

}  // namespace amptune::amp
