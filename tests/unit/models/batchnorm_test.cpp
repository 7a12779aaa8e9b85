// Synchronised BatchNorm: plain forward without a scope; two ranks (two threads with an in-memory
// cross-rank sum) equal one rank with the whole batch; every model BatchNorm goes through it.
//
// Tolerance of the comparisons with torch's kernel (kRtol 1e-5, kAtol 1e-6 on values of order 1):
// both sides compute in fp32 from the same inputs but sum the 80-160 values per channel in
// different orders (the kernel per channel, here per rank, then across ranks, the first sum in
// fp64) and normalise with different op sequences (kernel: invstd, then one fused affine; here
// rsqrt, then multiply and add). Each result is a few roundings of fp32 (eps 1.2e-7) away from
// the exact value, so differences of a few ulps (~1e-6 relative) are expected; the input gradient
// subtracts sums of similar size (dy - mean(dy) - xhat mean(dy xhat)), which turns relative
// error into absolute error of the order of eps times those sums, hence atol. Real mistakes (a
// local instead of a global statistic, a missing backward sum, n instead of n-1) change values by
// 1e-2 or more. The ResNet comparison goes through 20 layers and uses kNetTol.
#include "models/batchnorm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "models/resnet.h"
#include "models/rootnet.h"

namespace amptune::models {
namespace {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;
constexpr double kNetTol = 1e-4;

// Ranks as threads: each sum() blocks until every rank has contributed its tensor, then all
// return the total. Shapes must agree (a rank out of step fails instead of summing garbage);
// a rank that fails or a wait over 30 s breaks the world so no thread waits forever.
class InMemoryWorld {
 public:
  explicit InMemoryWorld(int size) : size_(size) {}

  CrossRankSum sum() {
    return [this](const torch::Tensor& t) { return exchange(t); };
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = true;
    cv_.notify_all();
  }
  int64_t calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  torch::Tensor exchange(const torch::Tensor& t) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++calls_;
    if (broken_) throw std::runtime_error("in-memory world is broken");
    if (arrived_ == 0) {
      acc_ = t.clone();
    } else if (t.sizes() != acc_.sizes() || t.scalar_type() != acc_.scalar_type()) {
      broken_ = true;
      cv_.notify_all();
      throw std::runtime_error("ranks out of step: sums of different shapes or dtypes");
    } else {
      acc_ += t;  // two ranks: a + b == b + a exactly, so arrival order does not matter
    }
    const int64_t generation = generation_;
    if (++arrived_ == size_) {
      result_ = acc_;
      acc_ = torch::Tensor();
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, std::chrono::seconds(30),
                             [&] { return generation_ != generation || broken_; }) ||
               generation_ == generation) {
      broken_ = true;
      cv_.notify_all();
      throw std::runtime_error("in-memory world: a rank did not arrive");
    }
    // result_ stays valid until every rank (this one included) has joined the next sum.
    return result_.clone();
  }

  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  int64_t calls_ = 0;
  bool broken_ = false;
  torch::Tensor acc_, result_;
};

// Runs body(rank) on one thread per rank and rethrows the first failure.
void run_ranks(InMemoryWorld& world, int size, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
        world.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

torch::Tensor identity_sum(const torch::Tensor& t) { return t; }

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected,
                  const std::string& what, double rtol = kRtol, double atol = kAtol) {
  ASSERT_TRUE(actual.defined() && expected.defined()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const auto a = actual.to(torch::kDouble), e = expected.to(torch::kDouble);
  const double diff = (a - e).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(a, e, rtol, atol)) << what << ": max abs difference " << diff;
}

void expect_bitwise(const torch::Tensor& actual, const torch::Tensor& expected,
                    const std::string& what) {
  ASSERT_EQ(actual.defined(), expected.defined()) << what;
  if (!actual.defined()) return;
  EXPECT_TRUE(actual.scalar_type() == expected.scalar_type() && torch::equal(actual, expected))
      << what;
}

// A BatchNorm2d with non-trivial parameters and statistics.
torch::nn::BatchNorm2d make_bn(const torch::nn::BatchNormOptions& options, uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::BatchNorm2d bn(options);
  torch::NoGradGuard no_grad;
  if (options.affine()) {
    bn->weight.copy_(torch::rand({options.num_features()}) + 0.5);
    bn->bias.copy_(torch::randn({options.num_features()}));
  }
  if (options.track_running_stats()) {
    bn->running_mean.copy_(torch::randn({options.num_features()}) * 0.3);
    bn->running_var.copy_(torch::rand({options.num_features()}) + 0.5);
    bn->num_batches_tracked.fill_(5);
  }
  return bn;
}

torch::nn::BatchNorm2d copy_of(const torch::nn::BatchNorm2d& bn) {
  return torch::nn::BatchNorm2d(std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(bn->clone()));
}

void expect_same_state(const torch::nn::BatchNorm2dImpl& a, const torch::nn::BatchNorm2dImpl& b,
                       const std::string& what) {
  expect_bitwise(a.running_mean, b.running_mean, what + " running_mean");
  expect_bitwise(a.running_var, b.running_var, what + " running_var");
  expect_bitwise(a.num_batches_tracked, b.num_batches_tracked, what + " num_batches_tracked");
}

TEST(ModelsBatchNorm, WithoutScopeIsForwardBitwise) {
  const auto base = make_bn(torch::nn::BatchNormOptions(3), 1);
  torch::manual_seed(2);
  const auto x = torch::randn({8, 3, 5, 4}) * 2 + 1;
  for (bool training : {true, false}) {
    auto a = copy_of(base), b = copy_of(base);
    a->train(training);
    b->train(training);
    const std::string what = training ? "train" : "eval";
    ASSERT_FALSE(batch_norm_sync_active());
    expect_bitwise(batch_norm(*a, x), b->forward(x), what + " output");
    expect_same_state(*a, *b, what);
  }
}

TEST(ModelsBatchNorm, EvalModeUnderScopeIsForwardAndNeverSums) {
  for (bool track : {true, false}) {
    const auto base = make_bn(torch::nn::BatchNormOptions(3).track_running_stats(track), 3);
    torch::manual_seed(4);
    const auto x = torch::randn({8, 3, 5, 4});
    auto a = copy_of(base), b = copy_of(base);
    a->eval();
    b->eval();
    int calls = 0;
    ScopedBatchNormSync scope([&](const torch::Tensor& t) {
      ++calls;
      return t;
    });
    expect_bitwise(batch_norm(*a, x), b->forward(x), "eval output");
    expect_same_state(*a, *b, "eval");
    EXPECT_EQ(calls, 0);
  }
}

TEST(ModelsBatchNorm, ScopeIsThreadLocalAndNotNestable) {
  {
    ScopedBatchNormSync scope(identity_sum);
    EXPECT_TRUE(batch_norm_sync_active());
    EXPECT_THROW(ScopedBatchNormSync nested(identity_sum), std::logic_error);
    bool other_thread_active = true;
    std::thread([&] { other_thread_active = batch_norm_sync_active(); }).join();
    EXPECT_FALSE(other_thread_active);
  }
  EXPECT_FALSE(batch_norm_sync_active());
  EXPECT_THROW(ScopedBatchNormSync empty{CrossRankSum()}, std::logic_error);
  ScopedBatchNormSync again(identity_sum);  // usable again once the first has ended
  EXPECT_TRUE(batch_norm_sync_active());
}

// One step of the single-process reference or of a rank: y = bn(x), loss = (y * w).sum().
struct Step {
  torch::Tensor y, x_grad;
};
Step step(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& w,
          bool synced) {
  auto xg = x.detach().clone().requires_grad_(true);
  torch::Tensor y = synced ? batch_norm(bn, xg) : bn.forward(xg);
  (y * w).sum().backward();
  return {y.detach(), xg.grad()};
}

TEST(ModelsBatchNorm, WorldOfOneEqualsForward) {
  for (bool affine : {true, false}) {
    const auto base = make_bn(torch::nn::BatchNormOptions(3).affine(affine), 5);
    torch::manual_seed(6);
    const auto x = torch::randn({8, 3, 5, 4}) * 3 - 2;
    const auto w = torch::randn({8, 3, 5, 4});
    auto ref = copy_of(base), bn = copy_of(base);
    const Step expected = step(*ref, x, w, false);
    int calls = 0;
    Step actual;
    {
      ScopedBatchNormSync scope([&](const torch::Tensor& t) {
        ++calls;
        return t;
      });
      actual = step(*bn, x, w, true);
    }
    const std::string what = affine ? "affine" : "no affine";
    EXPECT_EQ(calls, 4) << what << ": 2 sums forward, 2 backward";
    expect_close(actual.y, expected.y, what + " output");
    expect_close(actual.x_grad, expected.x_grad, what + " input grad");
    if (affine) {
      expect_close(bn->weight.grad(), ref->weight.grad(), what + " weight grad");
      expect_close(bn->bias.grad(), ref->bias.grad(), what + " bias grad");
    }
    expect_close(bn->running_mean, ref->running_mean, what + " running_mean");
    expect_close(bn->running_var, ref->running_var, what + " running_var");
    expect_bitwise(bn->num_batches_tracked, ref->num_batches_tracked, what + " num_batches");
  }
}

struct TwoRankCase {
  std::string name;
  torch::nn::BatchNormOptions options;
};

// 2 ranks x batch 4 == 1 rank x batch 8, over two steps (running statistics accumulate, gradients
// accumulate). Rank 0 runs backward inside its scope, rank 1 after its scope has ended.
TEST(ModelsBatchNorm, TwoRanksEqualOneRankWithTheWholeBatch) {
  const std::vector<TwoRankCase> cases = {
      {"default", torch::nn::BatchNormOptions(3)},
      {"momentum 0.3, eps 1e-3", torch::nn::BatchNormOptions(3).momentum(0.3).eps(1e-3)},
      {"cumulative average", torch::nn::BatchNormOptions(3).momentum(c10::nullopt)},
      {"no affine", torch::nn::BatchNormOptions(3).affine(false)},
      {"no running stats", torch::nn::BatchNormOptions(3).track_running_stats(false)},
  };
  constexpr int kSteps = 2, kRanks = 2, kBatch = 8;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto base = make_bn(c.options, 7);
    torch::manual_seed(8);
    std::vector<torch::Tensor> xs, ws;
    for (int s = 0; s < kSteps; ++s) {
      xs.push_back(torch::randn({kBatch, 3, 5, 4}) * 2 + 0.5 * (s + 1));
      ws.push_back(torch::randn({kBatch, 3, 5, 4}));
    }

    auto ref = copy_of(base);
    std::vector<Step> expected;
    for (int s = 0; s < kSteps; ++s) expected.push_back(step(*ref, xs[s], ws[s], false));

    std::vector<torch::nn::BatchNorm2d> bns = {copy_of(base), copy_of(base)};
    std::vector<std::vector<Step>> got(kRanks);
    InMemoryWorld world(kRanks);
    run_ranks(world, kRanks, [&](int r) {
      const int64_t half = kBatch / kRanks;
      for (int s = 0; s < kSteps; ++s) {
        const auto x = xs[s].narrow(0, r * half, half);
        const auto w = ws[s].narrow(0, r * half, half);
        auto xg = x.detach().clone().requires_grad_(true);
        torch::Tensor loss, y;
        {
          ScopedBatchNormSync scope(world.sum());
          y = batch_norm(*bns[r], xg);
          loss = (y * w).sum();
          if (r == 0) loss.backward();
        }
        if (r == 1) loss.backward();
        got[r].push_back({y.detach(), xg.grad()});
      }
    });
    EXPECT_EQ(world.calls(), kRanks * kSteps * 4);

    for (int s = 0; s < kSteps; ++s) {
      const std::string at = "step " + std::to_string(s);
      expect_close(torch::cat({got[0][s].y, got[1][s].y}), expected[s].y, at + " output");
      expect_close(torch::cat({got[0][s].x_grad, got[1][s].x_grad}), expected[s].x_grad,
                   at + " input grad");
    }
    if (c.options.affine()) {
      expect_close(bns[0]->weight.grad() + bns[1]->weight.grad(), ref->weight.grad(),
                   "weight grad (sum over ranks)");
      expect_close(bns[0]->bias.grad() + bns[1]->bias.grad(), ref->bias.grad(),
                   "bias grad (sum over ranks)");
    }
    if (c.options.track_running_stats()) {
      expect_close(bns[0]->running_mean, ref->running_mean, "running_mean");
      expect_close(bns[0]->running_var, ref->running_var, "running_var");
      expect_bitwise(bns[0]->num_batches_tracked, ref->num_batches_tracked, "num_batches");
      EXPECT_EQ(ref->num_batches_tracked.item<int64_t>(), 5 + kSteps);
      // Every rank sees the same global sums, so the ranks' buffers agree exactly.
      expect_same_state(*bns[0], *bns[1], "rank 0 vs rank 1");
    }
  }
}

// Guards the test above: without synchronisation the two halves give different results.
TEST(ModelsBatchNorm, LocalStatisticsDifferFromTheWholeBatch) {
  const auto base = make_bn(torch::nn::BatchNormOptions(3), 7);
  torch::manual_seed(8);
  const auto x = torch::randn({8, 3, 5, 4}) * 2 + 0.5;
  auto full = copy_of(base), half = copy_of(base);
  torch::NoGradGuard no_grad;
  const auto y_full = full->forward(x);
  const auto y_half = half->forward(x.narrow(0, 0, 4));
  EXPECT_GT((y_half - y_full.narrow(0, 0, 4)).abs().max().item<double>(), 1e-2);
}

TEST(ModelsBatchNorm, ComputesInFp32AndReturnsTheInputDtype) {
  const auto base = make_bn(torch::nn::BatchNormOptions(3), 9);
  torch::manual_seed(10);
  const auto x = torch::randn({4, 3, 5, 4}).to(torch::kBFloat16);
  auto a = copy_of(base), b = copy_of(base);
  torch::Tensor y;
  {
    ScopedBatchNormSync scope(identity_sum);
    y = batch_norm(*a, x);
  }
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(a->running_mean.scalar_type(), torch::kFloat);
  const auto expected = b->forward(x.to(torch::kFloat));
  // One bf16 rounding of the output (8 bits of mantissa).
  expect_close(y, expected, "bf16 output", 1e-2, 1e-2);
  expect_close(a->running_var, b->running_var, "running_var from the bf16 input");
}

TEST(ModelsBatchNorm, RefusesOneValuePerChannelAndBadShapesLeavingBuffersAlone) {
  const auto base = make_bn(torch::nn::BatchNormOptions(3), 11);
  auto bn = copy_of(base);
  ScopedBatchNormSync scope(identity_sum);
  EXPECT_THROW(batch_norm(*bn, torch::randn({1, 3, 1, 1})), ModelError);
  EXPECT_THROW(batch_norm(*bn, torch::randn({4, 2, 3, 3})), ModelError);
  EXPECT_THROW(batch_norm(*bn, torch::randn({4, 3, 3})), ModelError);
  expect_same_state(*bn, *base, "after refusals");
}

TEST(ModelsBatchNorm, ACrossRankSumOfTheWrongShapeIsAnError) {
  auto bn = make_bn(torch::nn::BatchNormOptions(3), 12);
  ScopedBatchNormSync scope([](const torch::Tensor& t) { return t.narrow(0, 0, 1); });
  EXPECT_THROW(batch_norm(*bn, torch::randn({4, 3, 2, 2})), ModelError);
}

int64_t count_batch_norms(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& m : model.modules(/*include_self=*/false))
    n += m->as<torch::nn::BatchNorm2d>() != nullptr;
  return n;
}

// Every BatchNorm of ResNet-18 goes through batch_norm(): a world of 1 gives the plain model's
// forward and backward, and the sum is called twice per layer each way.
TEST(ModelsBatchNorm, ResNet18UnderAWorldOfOneMatchesThePlainModel) {
  ResNetOptions o;
  o.depth = 18;
  o.num_classes = 10;
  o.width = 0.125;
  o.small_input = true;
  torch::manual_seed(13);
  ResNet plain(o);
  torch::manual_seed(13);
  ResNet synced(o);
  const int64_t layers = count_batch_norms(*plain);
  ASSERT_EQ(layers, 20);  // stem 1 + 8 blocks x 2 + 3 downsample
  torch::manual_seed(14);
  const auto x = torch::randn({4, 3, 16, 16});
  const auto w = torch::randn({4, 10});

  auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
  const auto ya = plain->forward(xa);
  (ya * w).sum().backward();

  int64_t calls = 0;
  torch::Tensor yb;
  {
    ScopedBatchNormSync scope([&](const torch::Tensor& t) {
      ++calls;
      return t;
    });
    yb = synced->forward(xb);
    EXPECT_EQ(calls, 2 * layers);
    (yb * w).sum().backward();
  }
  EXPECT_EQ(calls, 4 * layers);

  expect_close(yb, ya, "logits", kNetTol, kNetTol);
  expect_close(xb.grad(), xa.grad(), "input grad", kNetTol, kNetTol);
  const auto pa = plain->named_parameters(), pb = synced->named_parameters();
  for (const auto& item : pa) {
    expect_close(pb[item.key()].grad(), item.value().grad(), item.key() + " grad", kNetTol,
                 kNetTol);
  }
  const auto ba = plain->named_buffers(), bb = synced->named_buffers();
  for (const auto& item : ba)
    expect_close(bb[item.key()], item.value(), item.key(), kNetTol, kNetTol);
}

TEST(ModelsBatchNorm, RootNetHeadBatchNormsGoThroughItToo) {
  RootNetOptions o;
  o.backbone_depth = 18;
  o.width = 0.125;
  o.head_channels = 8;
  torch::manual_seed(15);
  RootNet plain(o);
  torch::manual_seed(15);
  RootNet synced(o);
  const int64_t layers = count_batch_norms(*plain);
  ASSERT_EQ(layers, 23);  // backbone 20 + 3 in the deconv head
  torch::manual_seed(16);
  const auto x = torch::randn({2, 3, 64, 64});
  const auto k = torch::tensor({1000.0f, 2000.0f});
  torch::NoGradGuard no_grad;
  const auto ya = plain->forward(x, k);
  int64_t calls = 0;
  ScopedBatchNormSync scope([&](const torch::Tensor& t) {
    ++calls;
    return t;
  });
  const auto yb = synced->forward(x, k);
  EXPECT_EQ(calls, 2 * layers);
  expect_close(yb, ya, "rootnet output", kNetTol, kNetTol);
  const auto ba = plain->named_buffers(), bb = synced->named_buffers();
  for (const auto& item : ba)
    expect_close(bb[item.key()], item.value(), item.key(), kNetTol, kNetTol);
}

}  // namespace
}  // namespace amptune::models
