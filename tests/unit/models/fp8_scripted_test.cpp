// FP8 on a TorchScript model's graph (models/scripted.cpp, amp/op_emulation.h): the fixture
// tests/fixtures/torchscript/fp8_gemms.pt (tools/make_fp8_fixture.py) holds a conv, Linears,
// a module with two F.linear calls in one forward and a bmm of two activations. Its aten::conv2d
// and aten::linear become FP8 GEMMs keyed by module ("twice", "twice#1"), the bmm does not; the
// outputs equal a hand computation with the slots' scales on two delayed steps; skip_modules
// keeps a module out.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/fp8.h"
#include "amp/fp8_gemm.h"
#include "core/config.h"
#include "core/settings.h"
#include "models/scripted.h"

namespace amptune::models {
namespace {

const std::string kFixture = std::string(AMPTUNE_FIXTURE_DIR) + "/torchscript/fp8_gemms.pt";
constexpr amp::Fp8Format kE4M3 = amp::Fp8Format::kE4M3;

amp::Policy fp8_policy(const std::string& skip = "[]") {
  Config c;
  const SourceLoc here{"test"};
  c.set_yaml("amp.fp8.enabled", "true", here);
  c.set_yaml("amp.fp8.skip_modules", skip, here);
  return amp::resolve_policy(Settings::from(c).amp, false);
}

// The fixture's forward by hand, each FP8 GEMM's operands quantised with its slots' scales
// (`fp8` false for keys that `skipped` names: plain fp32).
torch::Tensor by_hand(ScriptedModel& model, const torch::Tensor& x, amp::Fp8State& state,
                      const std::set<std::string>& skipped = {}) {
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : model->named_parameters()) p[item.key()] = item.value().detach();
  const auto q = [&](const std::string& key, amp::Fp8Role role, const torch::Tensor& v) {
    if (skipped.count(key)) return v;
    const float s = state.slot(key, role, kE4M3)->scale();
    return amp::fp8_quantise(v, s, kE4M3) * (1.0f / s);
  };
  const auto lin = [&](const std::string& key, const torch::Tensor& v, const std::string& w,
                       const std::string& b) {
    torch::Tensor y = torch::linear(q(key, amp::Fp8Role::kInput, v),
                                    q(key, amp::Fp8Role::kWeight, p.at(w)));
    if (skipped.count(key)) return b.empty() ? y : torch::linear(v, p.at(w), p.at(b));
    return b.empty() ? y : y + p.at(b);
  };
  torch::Tensor c = torch::conv2d(q("conv", amp::Fp8Role::kInput, x),
                                  q("conv", amp::Fp8Role::kWeight, p.at("conv.weight")), {}, 1, 1) +
                    p.at("conv.bias").view({1, -1, 1, 1});
  const torch::Tensor h = torch::adaptive_avg_pool2d(torch::relu(c), {2, 2}).flatten(1);
  const torch::Tensor f = lin("fc", h, "fc.weight", "fc.bias");
  const torch::Tensor r = torch::relu(lin("twice", f, "twice.w1", "twice.b"));
  const torch::Tensor g = lin("twice#1", r, "twice.w2", "");
  const torch::Tensor attn = torch::bmm(g.unsqueeze(2), g.unsqueeze(1)).sum(2) / 6.0;
  return lin("head", attn + g, "head.weight", "head.bias");
}

struct Fp8Run {
  explicit Fp8Run(ScriptedModel& model, const amp::Policy& p)
      : policy(p), engine(p, *model), policy_scope(policy), modules(engine.modules()),
        fp8(engine.fp8()) {}
  amp::Policy policy;
  amp::Engine engine;
  amp::ScopedPolicy policy_scope;
  amp::ScopedModules modules;
  amp::ScopedFp8 fp8;
};

TEST(Fp8Scripted, LinearsAndConvsAreFp8GemmsKeyedByModule) {
  ScriptedModel model(kFixture);
  Fp8Run run(model, fp8_policy());
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({3, 1, 8, 8});
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    model->zero_grad();
    const torch::Tensor y = model->forward(x);
    torch::Tensor want;
    {
      torch::NoGradGuard no_grad;
      want = by_hand(model, x, *run.engine.fp8());
    }
    EXPECT_TRUE(torch::equal(y, want)) << (y - want).abs().max().item<float>();
    y.pow(2).sum().backward();
    run.engine.fp8()->end_step();
  }
  std::set<std::string> keys;
  for (const auto& [name, t] : run.engine.fp8()->to_tensors()) {
    keys.insert(name.substr(0, name.find('.', 4)));
    EXPECT_TRUE(name.rfind(".scale") + 6 == name.size() || t.numel() == 2) << name;
  }
  // The bmm of two activations is no FP8 GEMM.
  EXPECT_EQ(keys, (std::set<std::string>{"fp8.conv", "fp8.fc", "fp8.head", "fp8.twice",
                                         "fp8.twice#1"}));
  // Every gradient reached the weights (the bias taken out of the op still learns).
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(item.value().grad().defined() && item.value().grad().abs().sum().item<float>() > 0)
        << item.key();
  }
}

TEST(Fp8Scripted, SkipModulesKeepsAModuleInTheBasePrecision) {
  ScriptedModel model(kFixture);
  Fp8Run run(model, fp8_policy("[twice]"));
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 1, 8, 8});
  torch::NoGradGuard no_grad;
  const torch::Tensor y = model->forward(x);
  const torch::Tensor want = by_hand(model, x, *run.engine.fp8(), {"twice", "twice#1"});
  EXPECT_TRUE(torch::equal(y, want)) << (y - want).abs().max().item<float>();
  for (const auto& [name, t] : run.engine.fp8()->to_tensors()) {
    EXPECT_EQ(name.find("twice"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace amptune::models
