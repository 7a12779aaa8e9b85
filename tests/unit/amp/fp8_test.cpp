// FP8 rounding and scaling (amp/fp8.h): the formats' facts (shared/REFERENCE.md section 10), bit
// for bit PyTorch's float8 casts where the build has them (2.x), and the same digest of a fixed
// set of 10^7 values on every build, so the 1.13 build's rounding equals the 2.x build's.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "amp/fp8.h"
#include "compat/torch_compat.h"
#include "core/error.h"
#include "core/hash.h"

namespace amptune::amp {
namespace {

constexpr Fp8Format kE4M3 = Fp8Format::kE4M3;
constexpr Fp8Format kE5M2 = Fp8Format::kE5M2;

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
float from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

TEST(Fp8Format, FactsOfBothFormats) {
  EXPECT_EQ(fp8_max(kE4M3), 448.0f);
  EXPECT_EQ(fp8_max(kE5M2), 57344.0f);
  // Smallest subnormals and normals stay; half the smallest subnormal ties to even (0).
  EXPECT_EQ(round_fp8(std::ldexp(1.0f, -9), kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(round_fp8(std::ldexp(1.0f, -10), kE4M3), 0.0f);
  EXPECT_EQ(round_fp8(std::ldexp(1.5f, -10), kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(round_fp8(std::ldexp(1.0f, -16), kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(round_fp8(std::ldexp(1.0f, -17), kE5M2), 0.0f);
  EXPECT_EQ(round_fp8(std::ldexp(1.0f, -6), kE4M3), std::ldexp(1.0f, -6));
  EXPECT_EQ(round_fp8(std::ldexp(1.0f, -14), kE5M2), std::ldexp(1.0f, -14));
  // 3 (E4M3) and 2 (E5M2) mantissa bits: 1.0625 lies halfway between 1 and 1.125 (E4M3): even.
  EXPECT_EQ(round_fp8(1.0625f, kE4M3), 1.0f);
  EXPECT_EQ(round_fp8(1.1875f, kE4M3), 1.25f);  // between 1.125 and 1.25: to even 1.25
  EXPECT_EQ(round_fp8(1.125f, kE5M2), 1.0f);    // between 1 and 1.25: even is 1
  EXPECT_EQ(round_fp8(1.375f, kE5M2), 1.5f);
  // Saturation: 464 ties between 448 and (non-existent) 480; beyond max all become max.
  EXPECT_EQ(round_fp8(464.0f, kE4M3), 448.0f);
  EXPECT_EQ(round_fp8(470.0f, kE4M3), 448.0f);
  EXPECT_EQ(round_fp8(1e30f, kE4M3), 448.0f);
  EXPECT_EQ(round_fp8(-std::numeric_limits<float>::infinity(), kE4M3), -448.0f);
  EXPECT_EQ(round_fp8(61440.0f, kE5M2), 57344.0f);
  EXPECT_EQ(round_fp8(std::numeric_limits<float>::infinity(), kE5M2), 57344.0f);
  EXPECT_TRUE(std::isnan(round_fp8(NAN, kE4M3)));
  EXPECT_TRUE(std::isnan(round_fp8(-NAN, kE5M2)));
  // Zero keeps its sign, also when a value flushes to it.
  EXPECT_EQ(bits_of(round_fp8(-0.0f, kE4M3)), 0x80000000u);
  EXPECT_EQ(bits_of(round_fp8(-1e-30f, kE5M2)), 0x80000000u);
  // fp32 subnormals flush.
  EXPECT_EQ(round_fp8(from_bits(1), kE4M3), 0.0f);
}

// Every class the issue names, then 10^7 values from a fixed generator (std::mt19937's output is
// specified by the standard, so both builds see the same values): raw bit patterns (every
// exponent, NaN and inf included) and values near the formats' ranges.
std::vector<float> value_classes() {
  std::vector<float> v = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX,
                          FLT_MIN, from_bits(1), from_bits(0x807FFFFFu)};
  for (Fp8Format f : {kE4M3, kE5M2}) {
    // Every fp8 value and every midpoint between neighbours (ties), each +-1 ulp of fp32.
    std::vector<float> grid;
    for (uint32_t b = 0; b < 0x7F800000u; b += 1u << 16) {
      const float r = round_fp8(from_bits(b), f);
      if (grid.empty() || grid.back() != r) grid.push_back(r);
    }
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
      const float mid = (grid[i] + grid[i + 1]) / 2;
      for (float x : {grid[i], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        v.push_back(x);
        v.push_back(-x);
      }
    }
    const float max = fp8_max(f);
    for (float x : {max, std::nextafter(max, INFINITY), max * 1.03125f, max * 1.0625f,
                    std::nextafter(max * 1.0625f, 0.0f), max * 1.07f, max * 2}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  std::mt19937 gen(20261206);
  for (int i = 0; i < 5000000; ++i) v.push_back(from_bits(static_cast<uint32_t>(gen())));
  for (int i = 0; i < 5000000; ++i) {
    // |x| from 2^-20 to 2^17 (the formats' ranges and beyond), any sign and mantissa.
    const uint32_t exponent = 127 - 20 + static_cast<uint32_t>(gen() % 38);
    const uint32_t b = (gen() & 0x807FFFFFu) | (exponent << 23);
    v.push_back(from_bits(b));
  }
  return v;
}

// NaN's payload is not part of the contract: every NaN hashes as one pattern.
std::string digest(const torch::Tensor& t) {
  std::vector<uint32_t> b(static_cast<size_t>(t.numel()));
  const float* p = t.data_ptr<float>();
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::isnan(p[i]) ? 0x7FC00000u : bits_of(p[i]);
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(b.data()), b.size() * 4));
}

void expect_same_bits(const torch::Tensor& want, const torch::Tensor& got,
                      const torch::Tensor& x, const char* what) {
  const float* w = want.data_ptr<float>();
  const float* g = got.data_ptr<float>();
  const float* in = x.data_ptr<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool same = std::isnan(w[i]) ? std::isnan(g[i]) : bits_of(w[i]) == bits_of(g[i]);
    if (!same && ++wrong <= 5) {
      ADD_FAILURE() << what << ": x=" << in[i] << " (0x" << std::hex << bits_of(in[i])
                    << std::dec << ") want " << w[i] << " got " << g[i];
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

// The digests of round_to_fp8 over value_classes(), made by the 2.x build, where the test below
// checks them against PyTorch's casts first: the 1.13 build, which has no float8, must give them.
const char* const kE4M3Digest =
    "d3db47c9576cdafcd45b715773069e969a7fc1e61a320af75cabf61efacdf260";
const char* const kE5M2Digest =
    "b0b35f6c003f2b8f6172a4f17408f59b53031881f31b15cdb8c78cfb53f3e33e";

TEST(Fp8Format, BitForBitPyTorchsCastsAndTheSameOnEveryBuild) {
  const std::vector<float> values = value_classes();
  const torch::Tensor x = torch::from_blob(const_cast<float*>(values.data()),
                                           {static_cast<int64_t>(values.size())}, torch::kFloat);
  for (Fp8Format f : {kE4M3, kE5M2}) {
    SCOPED_TRACE(to_string(f));
    const torch::Tensor ours = round_to_fp8(x, f);
    expect_same_bits(ours, round_to_fp8_ops(x, f), x, "tensor-op path");
    if (compat::kHasFloat8) {
      const float max = fp8_max(f);
      const torch::Tensor torch_cast =
          compat::through_float8(x.clamp(-max, max), f == kE4M3).contiguous();
      expect_same_bits(torch_cast, ours, x, "PyTorch's float8 cast of the clamped value");
    }
    const std::string want = f == kE4M3 ? kE4M3Digest : kE5M2Digest;
    EXPECT_EQ(digest(ours), want) << "the digest of the rounding of value_classes()";
  }
}

TEST(Fp8Format, FusedQuantiseIsTheTwoStepsBitForBit) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::cat({torch::randn({100000}) * 50, torch::randn({1000}) * 1e-4,
                                      torch::tensor({0.0f, -0.0f, NAN, INFINITY, 1e30f})});
  for (Fp8Format f : {kE4M3, kE5M2}) {
    for (float scale : {1.0f, 0.37f, 8.96f, 3584.0f, 1e-3f}) {
      SCOPED_TRACE(std::string(to_string(f)) + " scale " + std::to_string(scale));
      const torch::Tensor q = fp8_quantise(x, scale, f);
      expect_same_bits(round_to_fp8(x * scale, f), q, x, "fp8_quantise");
      expect_same_bits(round_to_fp8_ops(x * scale, f), q, x, "tensor-op path");
      expect_same_bits(q * (1.0f / scale), fp8_fake_quantise(x, scale, f), x,
                       "fp8_fake_quantise");
    }
  }
}

TEST(Fp8Scaling, TransformerEnginesScaleFromAmax) {
  EXPECT_EQ(fp8_amax(torch::tensor({-3.0f, 2.0f})), 3.0f);
  EXPECT_EQ(fp8_amax(torch::tensor({-1.0f, 2.5f})), 2.5f);
  EXPECT_EQ(fp8_amax(torch::empty({0})), 0.0f);
  EXPECT_TRUE(std::isnan(fp8_amax(torch::tensor({1.0f, NAN}))));
  EXPECT_EQ(fp8_amax(torch::tensor({-INFINITY, 1.0f})), INFINITY);
  EXPECT_EQ(fp8_scale_from_amax(448.0f, kE4M3, 0), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(2.0f, kE4M3, 0), 224.0f);
  EXPECT_EQ(fp8_scale_from_amax(2.0f, kE4M3, 1), 112.0f);   // / 2^margin
  EXPECT_EQ(fp8_scale_from_amax(2.0f, kE5M2, 3), 3584.0f);
  EXPECT_EQ(fp8_scale_from_amax(0.0f, kE4M3, 0), 1.0f);     // amax 0: scale 1
  EXPECT_EQ(fp8_scale_from_amax(INFINITY, kE4M3, 0), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(NAN, kE5M2, 0), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(1e-40f, kE5M2, 0), FLT_MAX);  // the quotient overflows
  // The tensor's amax lands at fp8_max / 2^margin.
  const float s = fp8_scale_from_amax(3.7f, kE4M3, 2);
  EXPECT_FLOAT_EQ(3.7f * s, 112.0f);
}

TEST(Fp8Scaling, DelayedScaleComesFromTheStepsBefore) {
  Fp8Scaling scaling;
  scaling.amax_history_len = 3;
  Fp8Slot slot(kE4M3, scaling);
  const auto amax = [](float a) { return torch::tensor({a, -a / 2}); };
  EXPECT_EQ(slot.scale_for(amax(4.0f)), 1.0f);  // before any step: 1
  slot.scale_for(amax(8.0f));                    // a second call in the step: max of the two
  slot.end_step();
  EXPECT_EQ(slot.history(), (std::vector<float>{8.0f}));
  EXPECT_EQ(slot.scale_for(amax(100.0f)), 56.0f);  // 448 / 8, not from this tensor
  slot.end_step();
  EXPECT_EQ(slot.scale(), 448.0f / 100.0f);
  slot.scale_for(amax(1.0f));
  slot.end_step();
  slot.scale_for(amax(2.0f));
  slot.end_step();  // history full: 8 leaves
  EXPECT_EQ(slot.history(), (std::vector<float>{100.0f, 1.0f, 2.0f}));
  EXPECT_EQ(slot.scale(), 448.0f / 100.0f);  // max over the history
  slot.end_step();  // not quantised this step: 0 enters, 100 leaves
  EXPECT_EQ(slot.history(), (std::vector<float>{1.0f, 2.0f, 0.0f}));
  EXPECT_EQ(slot.scale(), 224.0f);
  // An overflowed step's NaN is kept in the history, not used for the scale.
  slot.scale_for(torch::tensor({NAN, 1.0f}));
  slot.end_step();
  EXPECT_TRUE(std::isnan(slot.history().back()));
  EXPECT_EQ(slot.scale(), 224.0f);

  scaling.amax_max = false;  // most_recent
  Fp8Slot recent(kE5M2, scaling);
  recent.scale_for(amax(4.0f));
  recent.end_step();
  recent.scale_for(amax(1.0f));
  recent.end_step();
  EXPECT_EQ(recent.scale(), 57344.0f);
}

TEST(Fp8Scaling, CurrentScalingUsesTheTensorsOwnAmax) {
  Fp8Scaling scaling;
  scaling.delayed = false;
  scaling.margin = 1;
  Fp8Slot slot(kE4M3, scaling);
  EXPECT_EQ(slot.scale_for(torch::tensor({-7.0f, 3.5f})), 32.0f);  // 448 / 7 / 2
  slot.end_step();
  EXPECT_EQ(slot.history(), (std::vector<float>{7.0f}));
  // Quantised with it, the amax sits at fp8_max / 2^margin.
  const torch::Tensor q = fp8_quantise(torch::tensor({-7.0f, 3.5f}), 32.0f, kE4M3);
  EXPECT_EQ(q[0].item<float>(), -224.0f);
  EXPECT_EQ(q[1].item<float>(), 112.0f);
}

TEST(Fp8State, CheckpointRoundTripAndRestoredScale) {
  Fp8Scaling scaling;
  scaling.amax_history_len = 4;
  Fp8State state(scaling);
  auto w = state.slot("fc", Fp8Role::kWeight, kE4M3);
  auto g = state.slot("fc", Fp8Role::kGradOutput, kE5M2);
  for (float a : {1.0f, 3.0f, 2.0f}) {
    w->scale_for(torch::tensor({a}));
    g->scale_for(torch::tensor({a * 1000}));
    state.end_step();
  }
  const auto tensors = state.to_tensors();
  ASSERT_EQ(tensors.count("fp8.fc.weight.history"), 1u);
  ASSERT_EQ(tensors.count("fp8.fc.grad_output.scale"), 1u);

  Fp8State again(scaling);
  again.load(tensors, "epoch_1.safetensors");
  EXPECT_EQ(again.to_tensors().size(), tensors.size());  // kept before the slots are made
  auto w2 = again.slot("fc", Fp8Role::kWeight, kE4M3);
  auto g2 = again.slot("fc", Fp8Role::kGradOutput, kE5M2);
  EXPECT_EQ(w2->history(), w->history());
  EXPECT_EQ(w2->scale(), w->scale());
  EXPECT_EQ(g2->scale(), g->scale());
  // The next steps agree.
  for (auto* s : {w.get(), w2.get()}) s->scale_for(torch::tensor({5.0f}));
  state.end_step();
  again.end_step();
  EXPECT_EQ(w2->history(), w->history());
  EXPECT_EQ(w2->scale(), w->scale());
}

// A data-parallel rank that quantised nothing yet takes the other rank's slot list: the slots
// it lacks are made with their formats (restored from a loaded checkpoint), the rest kept.
TEST(Fp8State, SlotListsMakeTheMissingSlots) {
  Fp8Scaling scaling;
  scaling.amax_history_len = 4;
  Fp8State full(scaling);
  full.slot("fc", Fp8Role::kWeight, kE4M3)->scale_for(torch::tensor({3.0f}));
  full.slot("fc", Fp8Role::kGradOutput, kE5M2)->scale_for(torch::tensor({2.0f}));
  full.end_step();
  const std::vector<std::string> list = full.slot_list();
  EXPECT_EQ(list, (std::vector<std::string>{"fc.grad_output\te5m2", "fc.weight\te4m3"}));

  Fp8State empty(scaling);
  empty.load(full.to_tensors(), "epoch_0.safetensors");
  const auto kept = empty.slot("fc", Fp8Role::kWeight, kE4M3);
  EXPECT_EQ(empty.slot_count(), 1u);
  empty.add_slots(list);
  EXPECT_EQ(empty.slot_count(), 2u);
  EXPECT_EQ(empty.slot_list(), list);
  EXPECT_EQ(empty.slot("fc", Fp8Role::kWeight, kE4M3), kept);
  const auto made = empty.slot("fc", Fp8Role::kGradOutput, kE4M3);  // made by add_slots
  EXPECT_EQ(made->format(), kE5M2);
  EXPECT_EQ(made->history(), full.slot("fc", Fp8Role::kGradOutput, kE5M2)->history());
  EXPECT_EQ(empty.step_amaxes().size(), full.step_amaxes().size());
  for (const char* bad : {"fc.weight", "fc.weight\tfp16", "\te4m3"}) {
    EXPECT_THROW(empty.add_slots({bad}), std::invalid_argument) << bad;
  }
}

TEST(Fp8State, RefusesABadCheckpointNamingTheTensor) {
  Fp8State state(Fp8Scaling{});
  const auto refused = [&](const std::string& name, const torch::Tensor& t) {
    try {
      state.load({{name, t}}, "ckpt.safetensors");
      return std::string();
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(refused("fp8.fc.weight.history", torch::tensor({-1.0f})).find("fp8.fc.weight"),
            std::string::npos);
  EXPECT_NE(refused("fp8.fc.weight.history", torch::tensor({-INFINITY})), "");
  // An overflowed step's amax (a gradient's inf or NaN) is part of a history.
  EXPECT_EQ(refused("fp8.fc.weight.history", torch::tensor({INFINITY, NAN, 1.0f})), "");
  EXPECT_NE(refused("fp8.fc.weight.history", torch::zeros({2, 2})), "");
  EXPECT_NE(refused("fp8.fc.weight.history", torch::zeros({2}, torch::kDouble)), "");
  EXPECT_NE(refused("fp8.fc.bias.history", torch::zeros({2})).find("role"), std::string::npos);
  EXPECT_NE(refused("fp8.fc.weight.amax", torch::zeros({2})), "");
  EXPECT_EQ(refused("model.fc.weight", torch::zeros({2})), "");  // not the FP8 state's
}

}  // namespace
}  // namespace amptune::amp
