// LossScaler against apex's scaler.py trajectory, static scaling, unscale/check, combine_grad.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <torch/torch.h>

#include "amp/scaler.h"

namespace amptune::amp {
namespace {

ScalerOptions dynamic_opts() { return ScalerOptions{}; }

TEST(AmpScaler, ApexDynamicTrajectory) {
  LossScaler s(dynamic_opts());
  EXPECT_EQ(s.scale(), 65536.0);  // min(2^16, 2^24)
  bool skip = false;
  auto c = s.update(/*overflow=*/true, &skip);
  EXPECT_TRUE(skip);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->scale, 32768.0);
  EXPECT_EQ(c->reason, ScaleReason::kOverflow);
  s.update(true, &skip);
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.state().unskipped, 0);
  for (int i = 0; i < 1999; ++i) {
    EXPECT_FALSE(s.update(false, &skip));
    EXPECT_FALSE(skip);
  }
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.state().unskipped, 1999);
  c = s.update(false, &skip);  // the 2000th clean step grows
  ASSERT_TRUE(c);
  EXPECT_EQ(c->reason, ScaleReason::kGrowth);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.state().unskipped, 0);
  // An overflow resets the clean-step counter.
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 16384.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 16384.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.0);
}

TEST(AmpScaler, CapAtMaxScale) {
  LossScaler s(dynamic_opts());
  s.load_state({8388608.0, 0});  // 2^23
  for (int i = 0; i < 2000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 16777216.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_FALSE(s.update(false));  // min(2^24, 2^25) = 2^24: no change
  EXPECT_EQ(s.scale(), 16777216.0);
  EXPECT_EQ(s.state().unskipped, 0);
  ScalerOptions small = dynamic_opts();
  small.max_scale = 1000;
  EXPECT_EQ(LossScaler(small).scale(), 1000.0);
}

TEST(AmpScaler, MinScaleBoundsTheBackoff) {
  ScalerOptions o = dynamic_opts();
  o.min_scale = 8192;
  LossScaler s(o);
  for (double expect : {32768.0, 16384.0, 8192.0, 8192.0, 8192.0}) {
    bool skip = false;
    s.update(true, &skip);
    EXPECT_TRUE(skip);
    EXPECT_EQ(s.scale(), expect);
  }
  LossScaler unbounded(dynamic_opts());
  for (int i = 0; i < 20; ++i) unbounded.update(true);
  EXPECT_EQ(unbounded.scale(), 65536.0 / std::pow(2.0, 20));
}

TEST(AmpScaler, StaticNeverChecksNorSkips) {
  ScalerOptions o;
  o.dynamic = false;
  o.init_scale = 128;
  LossScaler s(o);
  EXPECT_EQ(s.scale(), 128.0);
  auto g = torch::tensor({256.0f, std::numeric_limits<float>::infinity()});
  EXPECT_FALSE(s.unscale_and_check({g}, false));  // never looks
  EXPECT_EQ(g[0].item<float>(), 2.0f);             // but unscales
  EXPECT_TRUE(std::isinf(g[1].item<float>()));
  for (int i = 0; i < 5000; ++i) {
    bool skip = true;
    EXPECT_FALSE(s.update(true, &skip));
    EXPECT_FALSE(skip);
  }
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(AmpScaler, UnscaleAndCheckFindsInfAndNan) {
  LossScaler s(dynamic_opts());
  auto a = torch::full({3}, 65536.0f * 2);
  auto b = torch::full({2, 2}, 65536.0f);
  EXPECT_FALSE(s.unscale_and_check({a, b, torch::Tensor()}, false));
  EXPECT_TRUE(torch::equal(a, torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(b, torch::ones({2, 2})));
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    for (bool combine : {false, true}) {
      auto x = torch::ones({4});
      auto y = torch::ones({5});
      y[3] = bad;
      EXPECT_TRUE(s.unscale_and_check({x, y}, combine)) << bad << " combine " << combine;
    }
  }
}

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(AmpScaler, CombineGradIsBitwiseEqual) {
  torch::manual_seed(3);
  LossScaler s(dynamic_opts());
  s.load_state({3.0, 0});  // 1/3 is inexact: any difference in the arithmetic would show
  for (bool with_inf : {false, true}) {
    std::vector<torch::Tensor> plain, combined;
    for (auto shape : std::vector<std::vector<int64_t>>{{7}, {3, 5}, {2, 2, 3, 3}, {1}}) {
      auto t = torch::randn(shape) * 1000;
      plain.push_back(t.clone());
      combined.push_back(t.clone());
    }
    if (with_inf) {
      plain[2].view({-1})[4] = std::numeric_limits<float>::infinity();
      combined[2].view({-1})[4] = std::numeric_limits<float>::infinity();
    }
    const bool f1 = s.unscale_and_check(plain, false);
    const bool f2 = s.unscale_and_check(combined, true);
    EXPECT_EQ(f1, with_inf);
    EXPECT_EQ(f2, with_inf);
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(same_bytes(plain[i], combined[i])) << i;
  }
  // Mixed dtypes: one buffer per dtype.
  auto d = torch::full({3}, 6.0, torch::kDouble);
  auto f = torch::full({3}, 6.0f);
  EXPECT_FALSE(s.unscale_and_check({d, f}, true));
  EXPECT_EQ(d[0].item<double>(), 2.0);
  EXPECT_EQ(f[0].item<float>(), 2.0f);
}

}  // namespace
}  // namespace amptune::amp
