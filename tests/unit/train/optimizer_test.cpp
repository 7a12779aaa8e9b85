// Fused (multi-tensor) SGD and Adam against LibTorch's own torch::optim::SGD / Adam: 20 steps from
// identical weights with identical gradient sequences (some parameters without a gradient in some
// steps, one never), every parameter and every state tensor compared bit for bit; checkpoints
// carry the state from fused to unfused and back, bit for bit.
//
// Why bitwise holds: the fused steps apply the same per-tensor operations with the same scalars
// in the same order as torch::optim's loop (weight decay by add, momentum mul_ then add_, Adam's
// sqrt / bias correction / eps / addcdiv), and on the CPU LibTorch's _foreach ops are loops over
// those same kernels. A difference (a reordered operation, a scalar converted differently) shows
// as a failure here; the measured differences are printed ("max diff").
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "support/scratch.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace amptune::train {
namespace {

constexpr int kSteps = 20;

// A few conv and linear layers; `frozen` never gets a gradient (its state must never appear).
struct Net : torch::nn::Module {
  Net() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    conv2 = register_module("conv2",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 6, 3).bias(false)));
    fc = register_module("fc", torch::nn::Linear(24, 8));
    head = register_module("head", torch::nn::Linear(8, 3));
    frozen = register_module("frozen", torch::nn::Linear(3, 2));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc{nullptr}, head{nullptr}, frozen{nullptr};
};

// Two nets with identical initial weights.
std::shared_ptr<Net> make_net() {
  torch::manual_seed(1);
  return std::make_shared<Net>();
}

// grads[step][param]: an undefined tensor where the parameter gets no gradient in that step.
// Magnitudes differ per parameter (1e-3 .. 10) so weight decay and eps matter differently.
using GradSeq = std::vector<std::vector<torch::Tensor>>;
GradSeq make_grads(const std::vector<torch::Tensor>& params) {
  torch::manual_seed(100);
  GradSeq seq(kSteps);
  for (int s = 0; s < kSteps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      const bool frozen = i + 2 >= params.size();  // the last module's weight and bias
      const bool skipped = (s + static_cast<int>(i)) % 5 == 0;
      if (frozen || skipped) {
        seq[s].emplace_back();
      } else {
        const double scale = std::pow(10.0, static_cast<double>(i % 5) - 3);
        seq[s].push_back(torch::randn(params[i].sizes()) * scale);
      }
    }
  }
  return seq;
}

void set_grads(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto p = params[i];
    p.mutable_grad() = grads[i].defined() ? grads[i].clone() : torch::Tensor();
  }
}

// Runs steps [from, to) of `seq` on `opt`.
void run_steps(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params,
               const GradSeq& seq, int from, int to) {
  for (int s = from; s < to; ++s) {
    set_grads(params, seq[s]);
    opt.step();
  }
}

struct Diff {
  double max_abs = 0;    // largest |a - b|
  double max_ratio = 0;  // largest |a - b| / (1 + |b|) (reported; the check is bitwise)
};

void compare(const torch::Tensor& a, const torch::Tensor& b, const std::string& what, Diff& d) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  const auto diff = (a - b).abs();
  d.max_abs = std::max(d.max_abs, diff.max().item<double>());
  const double ratio = (diff / (1 + b.abs())).max().item<double>();
  d.max_ratio = std::max(d.max_ratio, ratio);
  const torch::Tensor ca = a.contiguous(), cb = b.contiguous();
  EXPECT_EQ(std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()), 0)
      << what << ": not bitwise equal, |a - b| / (1 + |b|) up to " << ratio;
}

template <typename Map>
const torch::optim::OptimizerParamState* find_state(const Map& state, const torch::Tensor& p) {
  auto it = state.find(optimizer_state_key<Map>(p));
  return it == state.end() ? nullptr : it->second.get();
}

// Every parameter and every state tensor of (net_a, opt_a) against (net_b, opt_b); state must
// exist for the same parameters. Adam step counters must be equal exactly.
Diff compare_all(Net& net_a, torch::optim::Optimizer& opt_a, Net& net_b,
                 torch::optim::Optimizer& opt_b) {
  Diff d;
  const auto pa = net_a.named_parameters(), pb = net_b.named_parameters();
  for (const auto& item : pa) {
    const auto& name = item.key();
    const auto& a = item.value();
    const auto& b = pb[name];
    compare(a, b, name, d);
    const auto* sa = find_state(opt_a.state(), a);
    const auto* sb = find_state(opt_b.state(), b);
    EXPECT_EQ(sa == nullptr, sb == nullptr) << name << ": state present in only one optimizer";
    if (!sa || !sb) continue;
    if (const auto* ga = dynamic_cast<const torch::optim::SGDParamState*>(sa)) {
      const auto* gb = dynamic_cast<const torch::optim::SGDParamState*>(sb);
      EXPECT_NE(gb, nullptr) << name;
      if (gb) compare(ga->momentum_buffer(), gb->momentum_buffer(), name + ".momentum_buffer", d);
    } else {
      const auto* aa = dynamic_cast<const torch::optim::AdamParamState*>(sa);
      const auto* ab = dynamic_cast<const torch::optim::AdamParamState*>(sb);
      EXPECT_TRUE(aa && ab) << name;
      if (!aa || !ab) continue;
      EXPECT_EQ(aa->step(), ab->step()) << name << ".step";
      compare(aa->exp_avg(), ab->exp_avg(), name + ".exp_avg", d);
      compare(aa->exp_avg_sq(), ab->exp_avg_sq(), name + ".exp_avg_sq", d);
      EXPECT_EQ(aa->max_exp_avg_sq().defined(), ab->max_exp_avg_sq().defined()) << name;
      if (aa->max_exp_avg_sq().defined() && ab->max_exp_avg_sq().defined()) {
        compare(aa->max_exp_avg_sq(), ab->max_exp_avg_sq(), name + ".max_exp_avg_sq", d);
      }
    }
  }
  return d;
}

void report(const std::string& what, const Diff& d) {
  std::printf("[ max diff ] %s: max |fused - unfused| = %.3g, max |diff| / (1 + |value|) = %.3g\n",
              what.c_str(), d.max_abs, d.max_ratio);
  ::testing::Test::RecordProperty("max_abs_diff", std::to_string(d.max_abs));
}

using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<torch::Tensor> params, bool fused)>;

Factory from_config(const Config& config) {
  return [optim = Settings::from(config).optim](std::vector<torch::Tensor> params, bool fused) {
    return make_optimizer(optim, std::move(params), fused);
  };
}

Config sgd_config(bool nesterov) {
  Config c;
  c.set("optim.name", "sgd");
  c.set("optim.lr", 0.05);
  c.set("optim.momentum", 0.9);
  c.set("optim.nesterov", nesterov);
  c.set("optim.weight_decay", 1e-4);
  return c;
}

Config adam_config() {
  Config c;
  c.set("optim.name", "adam");
  c.set("optim.lr", 1e-3);
  c.set("optim.betas", nlohmann::json::array({0.85, 0.995}));
  c.set("optim.eps", 1e-7);
  c.set("optim.weight_decay", 1e-4);
  return c;
}

// 20 steps unfused and fused from the same weights and gradients; then the checks above, plus:
// the fused run really moved every parameter that had a gradient (and only those), kept the
// gradients as they were, and is a different object of the fused type.
// The memory layout of the 4-d tensors: the CPU places convolution weights channels_last
// (model.memory_format auto) and autograd gives their gradients the weight's layout; a gradient
// in the other layout is the case where the fused step's scratch (the parameter's layout) and
// the unfused step's temporaries (the inputs' layout) differ.
enum class Layout { kContiguous, kChannelsLastWeights, kChannelsLastBoth };

void relayout(const std::vector<torch::Tensor>& params) {
  for (auto p : params) {
    if (p.dim() == 4) p.set_data(p.detach().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

void relayout(GradSeq& seq) {
  for (auto& step : seq) {
    for (auto& g : step) {
      if (g.defined() && g.dim() == 4) g = g.contiguous(torch::MemoryFormat::ChannelsLast);
    }
  }
}

void expect_fused_matches(const Factory& factory, const std::string& what,
                          Layout layout = Layout::kContiguous) {
  auto net_u = make_net(), net_f = make_net();
  const auto params_u = net_u->parameters(), params_f = net_f->parameters();
  if (layout != Layout::kContiguous) {
    relayout(params_u);
    relayout(params_f);
    ASSERT_TRUE(params_f[0].is_contiguous(torch::MemoryFormat::ChannelsLast));
    ASSERT_FALSE(params_f[0].is_contiguous());
  }
  std::vector<torch::Tensor> initial;
  for (const auto& p : params_f) initial.push_back(p.detach().clone());
  GradSeq seq = make_grads(params_u);
  if (layout == Layout::kChannelsLastBoth) relayout(seq);
  auto unfused = factory(params_u, false);
  auto fused = factory(params_f, true);
  ASSERT_FALSE(is_fused(*unfused));
  ASSERT_TRUE(is_fused(*fused));

  run_steps(*unfused, params_u, seq, 0, kSteps);
  run_steps(*fused, params_f, seq, 0, kSteps);
  const Diff d = compare_all(*net_f, *fused, *net_u, *unfused);
  report(what, d);

  for (size_t i = 0; i < params_f.size(); ++i) {
    bool had_grad = false;
    for (const auto& step : seq) had_grad = had_grad || step[i].defined();
    EXPECT_EQ(!torch::equal(params_f[i], initial[i]), had_grad)
        << "parameter " << i << (had_grad ? " was not updated" : " changed without a gradient");
    // The last step's gradients are still the ones handed in (weight decay and nesterov work
    // on copies).
    if (seq.back()[i].defined()) {
      EXPECT_TRUE(torch::equal(params_f[i].grad(), seq.back()[i])) << i;
    }
  }
}

TEST(TrainFusedOptimizer, SgdMomentumWeightDecayMatchesUnfused) {
  expect_fused_matches(from_config(sgd_config(false)), "sgd momentum 0.9 wd 1e-4");
}

TEST(TrainFusedOptimizer, SgdNesterovMatchesUnfused) {
  expect_fused_matches(from_config(sgd_config(true)), "sgd nesterov momentum 0.9 wd 1e-4");
}

TEST(TrainFusedOptimizer, SgdPlainAndDampeningMatchUnfused) {
  expect_fused_matches(
      [](std::vector<torch::Tensor> params, bool fused) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::SGDOptions(0.1);
        if (fused) return std::make_unique<FusedSGD>(params, o);
        return std::make_unique<torch::optim::SGD>(params, o);
      },
      "sgd without momentum or weight decay");
  expect_fused_matches(
      [](std::vector<torch::Tensor> params, bool fused) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::SGDOptions(0.1).momentum(0.5).dampening(0.3).weight_decay(1e-3);
        if (fused) return std::make_unique<FusedSGD>(params, o);
        return std::make_unique<torch::optim::SGD>(params, o);
      },
      "sgd momentum 0.5 dampening 0.3 wd 1e-3");
}

TEST(TrainFusedOptimizer, AdamMatchesUnfused) {
  expect_fused_matches(from_config(adam_config()), "adam betas (0.85, 0.995) eps 1e-7 wd 1e-4");
}

TEST(TrainFusedOptimizer, AdamAmsgradMatchesUnfused) {
  expect_fused_matches(
      [](std::vector<torch::Tensor> params, bool fused) -> std::unique_ptr<torch::optim::Optimizer> {
        const auto o = torch::optim::AdamOptions(1e-2).amsgrad(true).weight_decay(0);
        if (fused) return std::make_unique<FusedAdam>(params, o);
        return std::make_unique<torch::optim::Adam>(params, o);
      },
      "adam amsgrad lr 1e-2");
}

TEST(TrainFusedOptimizer, ChannelsLastWeightsMatchUnfused) {
  for (Layout layout : {Layout::kChannelsLastWeights, Layout::kChannelsLastBoth}) {
    const std::string grads =
        layout == Layout::kChannelsLastBoth ? "channels_last" : "contiguous";
    expect_fused_matches(from_config(sgd_config(true)),
                         "sgd nesterov, channels_last weights, " + grads + " gradients", layout);
    expect_fused_matches(from_config(sgd_config(false)),
                         "sgd momentum, channels_last weights, " + grads + " gradients", layout);
    expect_fused_matches(from_config(adam_config()),
                         "adam, channels_last weights, " + grads + " gradients", layout);
  }
}

TEST(TrainFusedOptimizer, ParamGroupsKeepTheirOwnOptions) {
  expect_fused_matches(
      [](std::vector<torch::Tensor> params, bool fused) -> std::unique_ptr<torch::optim::Optimizer> {
        std::vector<torch::Tensor> first(params.begin(), params.begin() + 3);
        std::vector<torch::Tensor> rest(params.begin() + 3, params.end());
        std::vector<torch::optim::OptimizerParamGroup> groups;
        groups.emplace_back(first);
        groups.emplace_back(rest, std::make_unique<torch::optim::SGDOptions>(
                                      torch::optim::SGDOptions(0.01).momentum(0.8).nesterov(true)));
        const auto defaults = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4);
        if (fused) return std::make_unique<FusedSGD>(std::move(groups), defaults);
        return std::make_unique<torch::optim::SGD>(std::move(groups), defaults);
      },
      "sgd two param groups");
}

TEST(TrainFusedOptimizer, ConfigErrorsStayTheSame) {
  Config c = sgd_config(true);
  c.set("optim.momentum", 0.0);
  EXPECT_THROW(make_optimizer(Settings::from(c).optim, make_net()->parameters(), true),
               ConfigError);
}

// `first_fused` for 10 steps, checkpoint, load into a fresh net with the other kind, 10 more
// steps; compared with an uninterrupted 20-step run of the first kind.
void expect_checkpoint_carries_over(const Config& config, bool first_fused, const std::string& what) {
  const std::string dir = testing::scratch_dir();
  const OptimSettings optim = Settings::from(config).optim;
  auto net_ref = make_net();
  const auto params_ref = net_ref->parameters();
  const GradSeq seq = make_grads(params_ref);
  auto ref = make_optimizer(optim, params_ref, first_fused);
  run_steps(*ref, params_ref, seq, 0, kSteps);

  auto net_a = make_net();
  auto opt_a = make_optimizer(optim, net_a->parameters(), first_fused);
  run_steps(*opt_a, net_a->parameters(), seq, 0, kSteps / 2);
  const auto file = save_checkpoint(dir + "/half.pt", *net_a, *opt_a, CheckpointMeta{0, 10, "h"});

  torch::manual_seed(999);  // different initial weights: the checkpoint must bring them back
  auto net_b = std::make_shared<Net>();
  auto opt_b = make_optimizer(optim, net_b->parameters(), !first_fused);
  ASSERT_EQ(is_fused(*opt_b), !first_fused);
  records::EpochRow row;  // as the database records the file
  row.global_step = 10;
  row.checkpoint = file;
  load_checkpoint(row, *net_b, *opt_b, {"h"});
  EXPECT_EQ(opt_b->state().size(), opt_a->state().size());
  run_steps(*opt_b, net_b->parameters(), seq, kSteps / 2, kSteps);

  const Diff d = compare_all(*net_b, *opt_b, *net_ref, *ref);
  report(what, d);
}

TEST(TrainFusedOptimizer, CheckpointCarriesSgdStateBetweenFusedAndUnfused) {
  expect_checkpoint_carries_over(sgd_config(true), true, "sgd fused -> checkpoint -> unfused");
  expect_checkpoint_carries_over(sgd_config(true), false, "sgd unfused -> checkpoint -> fused");
}

TEST(TrainFusedOptimizer, CheckpointCarriesAdamStateBetweenFusedAndUnfused) {
  expect_checkpoint_carries_over(adam_config(), true, "adam fused -> checkpoint -> unfused");
  expect_checkpoint_carries_over(adam_config(), false, "adam unfused -> checkpoint -> fused");
}

}  // namespace
}  // namespace amptune::train
