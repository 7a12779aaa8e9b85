// amp.fp8.gemm scaled_mm (amp/fp8_gemm.h): a Linear's three GEMMs through torch._scaled_mm on
// float8 operands. Against the emulation, over fp32 and emulated bf16 bases, both formats, both
// recipes and shapes that need padding (3-D input included): the same values up to the order of
// fp32 rounding and the same amax histories; bit for bit a direct _scaled_mm call of the
// quantised operands (the path is _scaled_mm); a TorchScript graph's aten::linear (the op
// protocol of amp/op_emulation.h) gives amp::linear's bits; an empty batch works; where the
// LibTorch has no _scaled_mm (Debian's 1.13) a run refuses the key with what to do.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "amp/engine.h"
#include "amp/op_emulation.h"
#include "compat/torch_compat.h"
#include "core/error.h"
#include "unit/amp/fp8_gemm_util.h"

namespace amptune::amp {
namespace {

struct Lin : torch::nn::Module {
  Lin(int64_t in, int64_t out) : fc(register_module("fc", torch::nn::Linear(in, out))) {}
  torch::nn::Linear fc;
};

// Two training steps of Lin under amp.fp8 `keys`: per step the output, dgrad, wgrad and bias
// gradient; then the FP8 state's tensors.
struct Steps {
  std::vector<torch::Tensor> values;
  std::map<std::string, torch::Tensor> state;
};
Steps two_steps(const std::string& level, std::map<std::string, std::string> keys,
                const std::vector<int64_t>& x_shape, int64_t out) {
  torch::manual_seed(11);
  Lin net(x_shape.back(), out);
  Installed run(fp8_policy(level, keys), net);
  Steps s;
  for (int step = 0; step < 2; ++step) {
    net.zero_grad();
    auto x = (torch::randn(x_shape) * 3).requires_grad_(true);
    std::vector<int64_t> y_shape = x_shape;
    y_shape.back() = out;
    const torch::Tensor gy = torch::randn(y_shape) * 1e-2;
    const torch::Tensor y = amp::linear(*net.fc, x);
    y.backward(gy);
    s.values.insert(s.values.end(), {y.detach(), x.grad(), net.fc->weight.grad(),
                                     net.fc->bias.grad()});
    run.state->end_step();
  }
  s.state = run.state->to_tensors();
  return s;
}

bool skip() { return !compat::kHasScaledMm; }
constexpr const char* kWhy = "this LibTorch has no torch._scaled_mm (amp.fp8.gemm scaled_mm needs 2.5+)";

TEST(Fp8ScaledMm, LinearGivesTheEmulatedValues) {
  if (skip()) GTEST_SKIP() << kWhy;
  struct Shape {
    std::vector<int64_t> x;
    int64_t out;
  };
  const std::vector<Shape> shapes = {{{4, 5}, 3}, {{2, 3, 20}, 16}, {{32, 48}, 16}};
  const char* names[] = {"output", "dgrad", "wgrad", "bias gradient"};
  for (const std::string level : {"O0", "O1"}) {
    for (const std::string format : {"hybrid", "e4m3"}) {
      for (const std::string recipe : {"delayed", "current"}) {
        for (const Shape& shape : shapes) {
          const std::string where = level + " " + format + " " + recipe + " x " +
                                    c10::str(c10::IntArrayRef(shape.x)) + " -> " +
                                    std::to_string(shape.out);
          SCOPED_TRACE(where);
          std::map<std::string, std::string> keys = {{"amp.fp8.format", format},
                                                     {"amp.fp8.recipe", recipe}};
          const Steps want = two_steps(level, keys, shape.x, shape.out);
          keys["amp.fp8.gemm"] = "scaled_mm";
          const Steps got = two_steps(level, keys, shape.x, shape.out);
          ASSERT_EQ(got.values.size(), want.values.size());
          // fp32: K products summed in another order, then scaled once; a bf16 base's output
          // and gradients rounded after that may land one bf16 step apart.
          const double rel = level == "O0" ? 0.0 : 1.0 / 128;
          for (size_t i = 0; i < want.values.size(); ++i) {
            const torch::Tensor& a = got.values[i];
            const torch::Tensor& b = want.values[i];
            ASSERT_EQ(a.sizes(), b.sizes()) << names[i % 4];
            const double bound = 1e-5 * b.abs().max().item<double>();
            const double worst = ((a - b).abs() - rel * b.abs()).max().item<double>();
            EXPECT_LE(worst, bound) << names[i % 4] << ", step " << i / 4;
          }
          ASSERT_EQ(got.state.size(), want.state.size());
          for (const auto& [name, t] : want.state) {
            EXPECT_TRUE(torch::equal(got.state.at(name), t)) << name;
          }
        }
      }
    }
  }
}

// Current scaling on aligned sizes: the forward output and dgrad are exactly what
// torch._scaled_mm gives for the quantised operands (E4M3 input and weight, E5M2 gradient).
TEST(Fp8ScaledMm, IsTorchsScaledMmOfTheQuantisedOperands) {
  if (skip()) GTEST_SKIP() << kWhy;
  torch::manual_seed(12);
  Lin net(32, 16);
  Installed run(fp8_policy("O0", {{"amp.fp8.recipe", "current"}, {"amp.fp8.gemm", "scaled_mm"}}),
                net);
  const torch::Tensor x = torch::randn({16, 32}) * 5, gy = torch::randn({16, 16}) * 1e-3;
  const torch::Tensor w = net.fc->weight.detach();
  auto xin = x.clone().requires_grad_(true);
  const torch::Tensor y = amp::linear(*net.fc, xin);
  y.backward(gy);
  auto amax = [](const torch::Tensor& t) { return t.abs().max().item<float>(); };
  const float sx = fp8_scale_from_amax(amax(x), kE4M3, 0);
  const float sw = fp8_scale_from_amax(amax(w), kE4M3, 0);
  const float sg = fp8_scale_from_amax(amax(gy), kE5M2, 0);
  auto f8 = [](const torch::Tensor& v, float s, Fp8Format f) {
    return compat::to_float8(fp8_quantise(v, s, f), f == kE4M3);
  };
  auto inv = [](float s) { return torch::full({}, 1.0f / s); };
  const torch::Tensor want_y =
      compat::scaled_mm(f8(x, sx, kE4M3), f8(w, sw, kE4M3).t(), inv(sx), inv(sw)) +
      net.fc->bias.detach();
  EXPECT_TRUE(torch::equal(y, want_y)) << (y - want_y).abs().max().item<float>();
  const torch::Tensor want_dx = compat::scaled_mm(
      f8(gy, sg, kE5M2), f8(w, sw, kE4M3).t().contiguous().t(), inv(sg), inv(sw));
  EXPECT_TRUE(torch::equal(xin.grad(), want_dx)) << (xin.grad() - want_dx).abs().max();
}

// A TorchScript graph's aten::linear under scaled_mm: empty stand-ins for the op, the GEMM in
// op_output - amp::linear's bits, forward and backward.
TEST(Fp8ScaledMm, ScriptedLinearIsTheBuiltInOne) {
  if (skip()) GTEST_SKIP() << kWhy;
  torch::manual_seed(13);
  Lin net(20, 12);
  const torch::Tensor x = torch::randn({3, 4, 20}), gy = torch::randn({3, 4, 12});
  std::vector<torch::Tensor> out;
  for (const bool scripted : {false, true}) {
    Installed run(fp8_policy("O1", {{"amp.fp8.gemm", "scaled_mm"}}), net);
    net.zero_grad();
    auto xin = x.clone().requires_grad_(true);
    torch::Tensor y;
    if (scripted) {
      ModuleCall call(*net.fc);
      begin_op(OpKind::kLowPrecision, false, /*gemm=*/true, /*conv=*/false);
      const torch::Tensor a = op_input(call.input(xin));
      const torch::Tensor w = op_input(net.fc->weight);
      EXPECT_EQ(a.sizes(), (std::vector<int64_t>{3, 4, 0}));
      EXPECT_EQ(w.sizes(), (std::vector<int64_t>{12, 0}));
      const torch::Tensor b = op_input_optional(net.fc->bias);
      EXPECT_FALSE(b.defined()) << "the bias is added after the GEMM";
      y = call.output(op_output(torch::linear(a, w, b)));
    } else {
      y = amp::linear(*net.fc, xin);
    }
    y.backward(gy);
    out.insert(out.end(), {y.detach(), xin.grad(), net.fc->weight.grad(), net.fc->bias.grad()});
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(torch::equal(out[i], out[i + 4])) << "tensor " << i;
}

// A batch without samples (a data-parallel rank whose images were all corrupt): an empty output,
// no input gradient rows, a zero weight gradient - the emulation's.
TEST(Fp8ScaledMm, AnEmptyBatch) {
  if (skip()) GTEST_SKIP() << kWhy;
  std::vector<torch::Tensor> out;
  for (const std::string gemm : {"emulate", "scaled_mm"}) {
    torch::manual_seed(15);
    Lin net(5, 3);
    Installed run(fp8_policy("O0", {{"amp.fp8.gemm", gemm}}), net);
    auto x = torch::randn({0, 5}).requires_grad_(true);
    const torch::Tensor y = amp::linear(*net.fc, x);
    y.backward(torch::randn({0, 3}));
    out.insert(out.end(), {y.detach(), x.grad(), net.fc->weight.grad()});
  }
  EXPECT_EQ(out[3].sizes(), (std::vector<int64_t>{0, 3}));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(out[i], out[i + 3])) << "tensor " << i;
  EXPECT_TRUE(torch::equal(out[5], torch::zeros({3, 5})));
}

TEST(Fp8ScaledMm, RefusedWhereItCannotRun) {
  torch::manual_seed(14);
  Lin net(5, 3);
  const Policy p = fp8_policy("O0", {{"amp.fp8.gemm", "scaled_mm"}});
  EXPECT_EQ(p.fp8.summary(),
            "fp8 hybrid, delayed scaling (margin 0, amax history 1024, max), Linear GEMMs by "
            "scaled_mm");
  if (compat::kHasScaledMm) {
    EXPECT_NO_THROW(check_scaled_mm(torch::kCPU));
    EXPECT_NO_THROW(Engine engine(p, net));
    return;
  }
  try {
    Engine engine(p, net);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("amp.fp8.gemm is scaled_mm"), std::string::npos) << what;
    EXPECT_NE(what.find("use amp.fp8.gemm: emulate"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace amptune::amp
