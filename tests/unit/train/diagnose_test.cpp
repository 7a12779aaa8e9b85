// The comparison metrics of `amptune diagnose` on hand-made tensors with known answers, the
// first-divergence and advice rules on hand-made rows, and the forward work tune's objective
// ranks by, counted by hand on a tiny ResNet.
#include "train/diagnose.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/image.h"
#include "support/scratch.h"
#include "support/tiny_config.h"
#include "support/tiny_data.h"

namespace amptune::train {
namespace {

TEST(DiagnoseMetrics, KnownCosineAndErrors) {
  const auto ref = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f});
  const auto val = torch::tensor({1.0f, 2.0f, 3.0f, 5.0f});
  const auto r = compare_tensors(ref, val, TensorDtype::kFp32);
  EXPECT_EQ(r.numel, 4);
  EXPECT_NEAR(r.cosine, 34.0 / std::sqrt(30.0 * 39.0), 1e-12);
  EXPECT_DOUBLE_EQ(r.max_abs_err, 1.0);
  EXPECT_DOUBLE_EQ(r.max_rel_err, 0.25);
  EXPECT_DOUBLE_EQ(r.frac_rel_err_1e3, 0.25);
  EXPECT_DOUBLE_EQ(r.frac_rel_err_5e3, 0.25);
  EXPECT_TRUE(std::isnan(r.overflow_frac));  // fp32 has no low-precision shares
  EXPECT_TRUE(std::isnan(r.underflow_frac));
}

TEST(DiagnoseMetrics, SmallRelativeErrorsCountedByThreshold) {
  // relative errors 0, 2e-3, 1e-2, 4e-4
  const auto ref = torch::tensor({1.0, 1.0, 1.0, 1.0}, torch::kDouble);
  const auto val = torch::tensor({1.0, 1.002, 1.01, 1.0004}, torch::kDouble);
  const auto r = compare_tensors(ref, val, TensorDtype::kFp32);
  EXPECT_DOUBLE_EQ(r.frac_rel_err_1e3, 0.5);
  EXPECT_DOUBLE_EQ(r.frac_rel_err_5e3, 0.25);
  EXPECT_NEAR(r.max_rel_err, 1e-2, 1e-12);
}

TEST(DiagnoseMetrics, IdenticalTensorsGiveCosineOneAndNoError) {
  const auto t = torch::randn({1000});
  const auto r = compare_tensors(t, t.clone(), TensorDtype::kFp16);
  EXPECT_EQ(r.cosine, 1.0);
  EXPECT_EQ(r.max_abs_err, 0.0);
  EXPECT_EQ(r.max_rel_err, 0.0);
  EXPECT_EQ(r.frac_rel_err_1e3, 0.0);
  EXPECT_EQ(r.overflow_frac, 0.0);
}

TEST(DiagnoseMetrics, OverflowAndUnderflowSharesOfTheLowPrecisionTensor) {
  // 70000 overflows fp16 (max 65504); 1e-8 flushes to zero (below half the smallest subnormal,
  // 2^-25); 1e-6 is subnormal (below 2^-14); 1 and 0 (reference 0) are fine.
  const auto ref = torch::tensor({70000.0f, 1e-8f, 1e-6f, 1.0f, 0.0f});
  const auto r = compare_tensors(ref, ref, TensorDtype::kFp16);
  EXPECT_DOUBLE_EQ(r.overflow_frac, 0.2);
  EXPECT_DOUBLE_EQ(r.underflow_frac, 0.4);
  // bf16 has fp32's range: nothing over- or underflows.
  const auto b = compare_tensors(ref, ref, TensorDtype::kBf16);
  EXPECT_EQ(b.overflow_frac, 0.0);
  EXPECT_EQ(b.underflow_frac, 0.0);
}

TEST(DiagnoseMetrics, ScaledGradientsCompareUnscaledButOverflowScaled) {
  const auto ref = torch::tensor({1e-6f, 2e-6f, 0.75f, 0.25f});
  // At scale 1 the two tiny gradients are subnormal in fp16; at 2^16 they are normal.
  const auto at1 = compare_tensors(ref, ref, TensorDtype::kFp16, 1.0);
  EXPECT_DOUBLE_EQ(at1.underflow_frac, 0.5);
  const auto at64k = compare_tensors(ref, ref * 65536.0f, TensorDtype::kFp16, 65536.0);
  EXPECT_DOUBLE_EQ(at64k.underflow_frac, 0.0);
  EXPECT_EQ(at64k.cosine, 1.0);
  EXPECT_EQ(at64k.max_abs_err, 0.0);
  // 0.75 x 2^17 = 98304 overflows (0.25 x 2^17 does not).
  const auto at128k = compare_tensors(ref, ref * 131072.0f, TensorDtype::kFp16, 131072.0);
  EXPECT_DOUBLE_EQ(at128k.overflow_frac, 0.25);
}

TEST(DiagnoseMetrics, NonFiniteValuesAreLeftOutOfTheErrors) {
  const auto ref = torch::tensor({1.0f, 2.0f, 3.0f});
  const auto val = torch::tensor({1.0f, INFINITY, 3.0f});
  const auto r = compare_tensors(ref, val, TensorDtype::kFp16);
  EXPECT_EQ(r.max_abs_err, 0.0);
  EXPECT_TRUE(std::isnan(r.cosine));  // a value lost to inf has no direction
  EXPECT_NEAR(r.overflow_frac, 1.0 / 3, 1e-12);
}

records::DiagnosticRow row(const std::string& kind, int seq, const std::string& module,
                           double cosine, double overflow = 0, double underflow = 0) {
  records::DiagnosticRow r;
  r.kind = records::parse_diagnostic_kind(kind).value();
  r.seq = seq;
  r.module = module;
  r.cosine = cosine;
  r.overflow_frac = overflow;
  r.underflow_frac = underflow;
  return r;
}

TEST(DiagnoseRules, FirstDivergenceIsTheFirstModuleBelowTheThresholdOverBatches) {
  records::Diagnosis d;
  d.cosine_min = 0.99;
  d.rows = {row("forward", 0, "conv1", 0.999), row("forward", 1, "bn1", 0.995),
            row("forward", 2, "layer1.0", 0.9), row("gradient", 0, "conv1.weight", 0.5)};
  // A second batch where bn1 departs.
  auto second = row("forward", 1, "bn1", 0.98);
  second.batch = 1;
  d.rows.push_back(second);
  auto first = first_divergence(d);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->module, "bn1");
  d.rows.pop_back();
  first = first_divergence(d);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->module, "layer1.0");
  d.rows = {row("forward", 0, "conv1", 1.0)};
  EXPECT_FALSE(first_divergence(d).has_value());
}

// The CLI's table order: overflowing forward rows in execution order, other overflowing rows,
// then the rest by cosine with lost values (NaN) first.
TEST(DiagnoseRules, RowsBySeverity) {
  records::Diagnosis d;
  d.rows = {row("forward", 0, "conv1", 0.999), row("forward", 3, "layer2", 0.9, 0.1),
            row("gradient", 0, "conv1.weight", 0.5, 0.2), row("forward", 1, "bn1", 0.95, 0.3),
            row("forward", 2, "layer1", std::nan(""))};
  std::vector<std::string> order;
  for (const auto& r : rows_by_severity(d)) order.push_back(r.module);
  EXPECT_EQ(order, (std::vector<std::string>{"bn1", "layer2", "conv1.weight", "layer1", "conv1"}));
}

TEST(DiagnoseRules, AdviceForOverflowUnderflowAndBatchNorm) {
  records::Diagnosis d;
  d.cosine_min = 0.99;
  d.loss_scale = 1;
  d.rows = {row("forward", 0, "conv1", 1.0), row("forward", 1, "layer1.0.conv1", 0.2, 0.1),
            row("forward", 2, "layer1.0.bn1", 0.5),
            row("gradient", 0, "conv1.weight", 0.999, 0, 0.3)};
  AdviceContext c;
  c.opt_level = OptLevel::kO3;
  c.dtype = Dtype::kFp16;
  c.dynamic_scale = false;  // a static scale of 1
  c.cast_model = true;
  c.batchnorm_low = true;
  c.batchnorm_modules = {"layer1.0.bn1"};
  const auto advice = advise(d, c);
  ASSERT_EQ(advice.size(), 3u);
  EXPECT_EQ(advice[0].rule, records::AdviceRule::kActivationOverflow);
  EXPECT_EQ(advice[0].module, "layer1.0.conv1");
  EXPECT_NE(advice[0].advice.find("amp.fp32_modules: [layer1.0.conv1]"), std::string::npos);
  EXPECT_NE(advice[0].advice.find("amp.fp32_modules: [layer1.0]"), std::string::npos);  // O3
  EXPECT_EQ(advice[1].rule, records::AdviceRule::kGradientUnderflow);
  EXPECT_NE(advice[1].advice.find(": use amp.loss_scale: dynamic"), std::string::npos);
  EXPECT_EQ(advice[2].rule, records::AdviceRule::kBatchnormLowPrecision);
  EXPECT_NE(advice[2].advice.find("keep_batchnorm_fp32: true"), std::string::npos);
  // Under a dynamic scale the same underflow says the scale is held down instead.
  c.dynamic_scale = true;
  const auto dynamic = advise(d, c);
  ASSERT_EQ(dynamic.size(), 3u);
  EXPECT_EQ(dynamic[1].rule, records::AdviceRule::kGradientUnderflow);
  EXPECT_NE(dynamic[1].advice.find("the dynamic scale is low here"), std::string::npos)
      << dynamic[1].advice;
}

// A forward row whose output overflows in `overflow` of its values and whose input was inf/NaN
// in `input_nonfinite` of them.
records::DiagnosticRow fwd(int seq, const std::string& module, double overflow,
                         double input_nonfinite, int batch = 0) {
  records::DiagnosticRow r =
      row("forward", seq, module, overflow > 0 ? std::nan("") : 1.0, overflow);
  r.input_nonfinite_frac = input_nonfinite;
  r.batch = batch;
  return r;
}

AdviceContext o1_fp16() {
  AdviceContext c;
  c.opt_level = OptLevel::kO1;
  c.dtype = Dtype::kFp16;
  c.dynamic_scale = true;
  return c;
}

using Advice = std::pair<std::string, std::string>;  // module, advice

std::vector<Advice> overflow_advice(const records::Diagnosis& d, const AdviceContext& c) {
  std::vector<Advice> out;
  for (const auto& a : advise(d, c)) {
    if (a.rule == records::AdviceRule::kActivationOverflow) out.emplace_back(a.module, a.advice);
  }
  return out;
}

// Two overflows that start from finite values - a block's first convolution and its shortcut,
// whose input is the block's - are two rows, in execution order. What they feed (bn1, whose
// input is already inf) and what contains them (the shortcut's Sequential, the block, the stage,
// the whole model: their inputs were finite, but they only hold the overflow) are not named.
TEST(DiagnoseRules, TwoIndependentOverflowsGiveTwoRows) {
  records::Diagnosis d;
  d.rows = {fwd(9, "layer1", 0, 0),
            fwd(10, "layer2.0.conv1", 0.02, 0),
            fwd(11, "layer2.0.bn1", 1.0, 0.02),
            fwd(12, "layer2.0.conv2", 1.0, 1.0),
            fwd(13, "layer2.0.bn2", 1.0, 1.0),
            fwd(14, "layer2.0.downsample.0", 0.05, 0),
            fwd(15, "layer2.0.downsample.1", 1.0, 0.05),
            fwd(16, "layer2.0.downsample", 1.0, 0),
            fwd(17, "layer2.0", 1.0, 0),
            fwd(18, "layer2", 1.0, 0),
            fwd(19, "fc", 1.0, 1.0),
            fwd(20, "", 1.0, 0)};
  const auto starts = overflow_starts(d.rows);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0].module, "layer2.0.conv1");
  EXPECT_EQ(starts[1].module, "layer2.0.downsample.0");
  const auto advice = overflow_advice(d, o1_fp16());
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_EQ(advice[0], (Advice{"layer2.0.conv1",
                               "activations of layer2.0.conv1 overflow fp16 (2% of its outputs, "
                               "from finite inputs): keep it in fp32, amp.fp32_modules: "
                               "[layer2.0.conv1]"}));
  EXPECT_EQ(advice[1].first, "layer2.0.downsample.0");
  EXPECT_NE(advice[1].second.find("(5% of its outputs, from finite inputs)"), std::string::npos);
  // The first divergence is still the first module that departs.
  ASSERT_TRUE(first_divergence(d).has_value());
  EXPECT_EQ(first_divergence(d)->module, "layer2.0.conv1");
}

// After an overflow every module downstream only carries its inf/NaN: one row. Over batches, a
// module is named by the batches where its input was finite, its worst share among those.
TEST(DiagnoseRules, AnOverflowAndTheModulesThatCarryItGiveOneRow) {
  records::Diagnosis d;
  d.rows = {fwd(0, "conv1", 0.0005, 0),
            fwd(1, "bn1", 0.06, 0.0005),
            fwd(2, "layer1.0.conv1", 1.0, 1.0),
            fwd(3, "layer1.0.bn1", 1.0, 1.0),
            fwd(4, "layer1.0", 1.0, 1.0),
            fwd(5, "layer1", 1.0, 1.0),
            fwd(6, "fc", 1.0, 1.0),
            fwd(7, "", 1.0, 0),
            fwd(0, "conv1", 0.002, 0, 1),
            fwd(1, "bn1", 0.5, 0.002, 1)};
  const auto starts = overflow_starts(d.rows);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].module, "conv1");
  EXPECT_EQ(starts[0].overflow_frac, 0.002);
  EXPECT_EQ(starts[0].batch, 1);
  const auto advice = overflow_advice(d, o1_fp16());
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(advice[0].first, "conv1");
}

// A block whose output overflows because its convolution's does is not named beside it, even
// though the block's input was finite; a block whose own op (the residual sum) overflows, with
// no child that does, is.
TEST(DiagnoseRules, AParentOfAnOverflowingChildIsNotNamed) {
  records::Diagnosis d;
  d.rows = {fwd(30, "layer3.0.conv1", 0.08, 0), fwd(31, "layer3.0.bn1", 1.0, 0.08),
            fwd(35, "layer3.0", 1.0, 0), fwd(40, "layer3", 1.0, 0)};
  auto advice = overflow_advice(d, o1_fp16());
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(advice[0].first, "layer3.0.conv1");
  d.rows = {fwd(30, "layer3.0.conv1", 0, 0), fwd(35, "layer3.0", 0.01, 0),
            fwd(40, "layer3", 1.0, 0)};
  advice = overflow_advice(d, o1_fp16());
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(advice[0].first, "layer3.0");
}

// An overflow found with the earlier ones kept in fp32 (diagnose's further passes) is a row of
// its own, in execution order, naming what was kept; under O2/O3 each row names the block too.
TEST(DiagnoseRules, AnOverflowTheFirstHidGetsItsOwnRow) {
  records::Diagnosis d;
  d.rows = {fwd(0, "conv1", 0.001, 0), fwd(1, "bn1", 0.2, 0.001),
            fwd(30, "layer3.0.conv1", 1.0, 1.0)};
  AdviceContext c = o1_fp16();
  c.hidden_overflows = {{fwd(30, "layer3.0.conv1", 0.09, 0), {"conv1"}}};
  auto advice = overflow_advice(d, c);
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_EQ(advice[0].first, "conv1");
  EXPECT_EQ(advice[1].first, "layer3.0.conv1");
  EXPECT_EQ(advice[1].second,
            "with conv1 kept in fp32 (before, the inf/NaN of an earlier overflow reached it), "
            "activations of layer3.0.conv1 overflow fp16 (9% of its outputs, from finite "
            "inputs): keep it in fp32, amp.fp32_modules: [layer3.0.conv1]; together: "
            "amp.fp32_modules: [conv1, layer3.0.conv1]");
  c.opt_level = OptLevel::kO2;
  c.cast_model = true;
  advice = overflow_advice(d, c);
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_NE(advice[1].second.find("amp.fp32_modules: [layer3.0]"), std::string::npos);
}

// Without a recorded input (a module that passes none through amp::ModuleCall::input) nothing is
// known to start from finite values: the first module that overflows is named, as before.
TEST(DiagnoseRules, WithoutInputSharesTheFirstOverflowIsNamed) {
  records::Diagnosis d;
  d.rows = {fwd(0, "conv1", 0, std::nan("")), fwd(1, "bn1", 0.1, std::nan("")),
            fwd(2, "layer1", 1.0, std::nan(""))};
  EXPECT_TRUE(overflow_starts(d.rows).empty());
  EXPECT_EQ(overflow_advice(d, o1_fp16()),
            (std::vector<Advice>{{"bn1",
                                  "activations of bn1 overflow fp16 (10% of its outputs): "
                                  "keep it in fp32, amp.fp32_modules: [bn1]"}}));
}

// ResNet-18 at width 1/16 with the small-input stem on 12 x 12 one-channel images: conv1 is a
// 3x3 convolution from 1 to 4 channels at 144 positions (5184 multiply-accumulates), layer1 four
// 3x3 convolutions from 4 to 4 channels there (4 * 144 * 4 * 4 * 9 = 82944), fc maps 32 features
// to 4 classes (128).
TEST(ForwardWork, CountsConvolutionsAndLinearLayersAndTheOnesKeptInFp32) {
  const std::string dir = testing::scratch_dir();
  testing::write_tiny_idx(dir + "/data", 8, 4);
  Config c = testing::tiny_config();
  c.set("data.format", "idx");
  c.set("data.root", dir + "/data");
  c.set("data.val_split", "t10k");
  c.set("data.mean", nlohmann::json::array({0.3}));
  c.set("data.std", nlohmann::json::array({0.3}));
  c.set("data.batch_size", 4);
  c.set("amp.opt_level", "O1");
  const ForwardWork low = forward_work(c);
  EXPECT_GT(low.macs, 82944 + 5184 + 128);
  EXPECT_EQ(low.fp32_macs, 0);
  EXPECT_EQ(low.fp32_share(), 0);

  c.set("amp.fp32_modules", nlohmann::json::array({"conv1"}));
  EXPECT_EQ(forward_work(c).fp32_macs, 5184);
  c.set("amp.fp32_modules", nlohmann::json::array({"layer1"}));
  EXPECT_EQ(forward_work(c).fp32_macs, 82944);
  c.set("amp.fp32_modules", nlohmann::json::array({"fc", "conv1"}));
  const ForwardWork two = forward_work(c);
  EXPECT_EQ(two.fp32_macs, 128 + 5184);
  EXPECT_EQ(two.macs, low.macs);
  // The top-level modules cover all of it; O0 runs all of it in fp32.
  c.set("amp.fp32_modules",
        nlohmann::json::array({"conv1", "layer1", "layer2", "layer3", "layer4", "fc"}));
  EXPECT_EQ(forward_work(c).fp32_share(), 1.0);
  c.set("amp.fp32_modules", nlohmann::json::array());
  c.set("amp.opt_level", "O0");
  const ForwardWork all = forward_work(c);
  EXPECT_EQ(all.fp32_macs, low.macs);
  EXPECT_EQ(all.fp32_share(), 1.0);
  EXPECT_EQ(all.fp8_macs, 0);  // no FP8 without amp.fp8.enabled

  // FP8 (amp/fp8_gemm.h): every convolution and Linear is an FP8 GEMM, but those kept out.
  c.set("amp.opt_level", "O1");
  c.set("amp.dtype", "bf16");
  c.set("amp.fp8.enabled", true);
  const ForwardWork fp8 = forward_work(c);
  EXPECT_EQ(fp8.macs, low.macs);
  EXPECT_EQ(fp8.fp8_macs, low.macs);
  EXPECT_EQ(fp8.fp8_share(), 1.0);
  // The same products whichever kernels run them (also where this LibTorch has no _scaled_mm).
  c.set("amp.fp8.gemm", "scaled_mm");
  EXPECT_EQ(forward_work(c).fp8_macs, low.macs);
  c.set("amp.fp8.gemm", "emulate");
  c.set("amp.fp8.skip_modules", nlohmann::json::array({"fc"}));
  EXPECT_EQ(forward_work(c).fp8_macs, low.macs - 128);
  c.set("amp.fp32_modules", nlohmann::json::array({"layer1"}));  // no FP8 in fp32 either
  EXPECT_EQ(forward_work(c).fp8_macs, low.macs - 128 - 82944);
}

// A TorchScript model's work is every matmul-class op of its graph, not only its convolutions and
// nn.Linear layers (issue 46: a scripted LSTM classifier showed MFU 0.003 %, its gates' products
// uncounted; a transformer's attention scores and values were left out). The fixtures'
// multiply-accumulates are counted by hand in tests/fixtures/work/README.md (PyTorch's profiler
// agrees): the LSTM classifier 46144, the transformer (an nn.TransformerEncoderLayer and an
// attention written with @) 48448. amp.fp32_modules marks the products inside a module.
TEST(ForwardWork, CountsEveryMatmulOfAScriptedLstmAndTransformer) {
  const std::string dir = testing::scratch_dir();
  testing::write_tiny_idx(dir + "/data", 8, 4);
  Config c = testing::tiny_config();
  c.set("model.name", "torchscript");
  c.set("data.format", "idx");
  c.set("data.root", dir + "/data");
  c.set("data.val_split", "t10k");
  c.set("data.mean", nlohmann::json::array({0.3}));
  c.set("data.std", nlohmann::json::array({0.3}));
  c.set("data.batch_size", 4);
  const std::string fixtures = std::string(AMPTUNE_FIXTURE_DIR) + "/work/";

  c.set("model.path", fixtures + "lstm_classifier.pt");
  const ForwardWork lstm = forward_work(c);
  EXPECT_EQ(lstm.macs, 46144);
  EXPECT_TRUE(lstm.uncounted.empty());
  c.set("amp.opt_level", "O1");
  c.set("amp.fp32_modules", nlohmann::json::array({"lstm"}));
  EXPECT_EQ(forward_work(c).fp32_macs, 21504 + 24576);
  c.set("amp.fp32_modules", nlohmann::json::array());
  c.set("amp.opt_level", "O0");

  c.set("model.path", fixtures + "tiny_transformer.pt");
  const ForwardWork transformer = forward_work(c);
  EXPECT_EQ(transformer.macs, 48448);
  EXPECT_TRUE(transformer.uncounted.empty());
  EXPECT_EQ(transformer.fp32_macs, 48448);  // O0: all of it
  c.set("amp.opt_level", "O1");
  c.set("amp.fp32_modules", nlohmann::json::array({"attn"}));  // qkv, scores, values, proj
  EXPECT_EQ(forward_work(c).fp32_macs, 16896);
  c.set("amp.fp32_modules", nlohmann::json::array({"encoder"}));
  EXPECT_EQ(forward_work(c).fp32_macs, 9216 + 2304 + 2304 + 3072 + 12288);
}

// A fused kernel (here torch._native_multi_head_attention, nn.MultiheadAttention's inference fast
// path, called by the model itself) is not a product the table knows; LibTorch 1.13's CPU kernel
// computes through addmm and bmm, which are counted as they run: the embedding 2304, the
// attention's in-projection 9216, scores 2304, values 2304 and out-projection 3072, the head 64.
// Only a fused op inside which nothing was counted is named as uncounted.
TEST(ForwardWork, CountsTheProductsInsideAFusedAttentionKernel) {
  const std::string dir = testing::scratch_dir();
  testing::write_tiny_idx(dir + "/data", 8, 4);
  Config c = testing::tiny_config();
  c.set("model.name", "torchscript");
  c.set("model.path", std::string(AMPTUNE_FIXTURE_DIR) + "/work/fused_attention.pt");
  c.set("data.format", "idx");
  c.set("data.root", dir + "/data");
  c.set("data.val_split", "t10k");
  c.set("data.mean", nlohmann::json::array({0.3}));
  c.set("data.std", nlohmann::json::array({0.3}));
  c.set("data.batch_size", 4);
  const ForwardWork work = forward_work(c);
  EXPECT_EQ(work.macs, 2304 + 9216 + 2304 + 2304 + 3072 + 64);
  EXPECT_TRUE(work.uncounted.empty()) << work.uncounted.front();
}

// The training FLOPs of one sample (the MFU's numerator, docs/PERFORMANCE.md "MFU") are the
// forward pass's multiply-accumulates x 2 flops x 3 (forward + backward): for the tiny ResNet's
// conv1 alone (5184 multiply-accumulates, above) 31104, for its fc (128) 768.
TEST(ForwardWork, TrainingFlopsAreSixTimesTheMultiplyAccumulates) {
  ForwardWork conv1;
  conv1.macs = 5184;
  EXPECT_EQ(training_flops(conv1), 31104);
  ForwardWork fc;
  fc.macs = 128;
  EXPECT_EQ(training_flops(fc), 768);
}

// Full-size ResNet-50 on a 224 x 224 RGB image: torchvision publishes 4.09 G multiply-accumulates
// per image ("GFLOPS 4.09" in its weights table, counted as fvcore does: convolutions and the
// linear layer). The count here is within 2% of it, on an image folder of one JPEG resized
// and cropped to 224.
TEST(ForwardWork, ResNet50At224MatchesThePublishedFigure) {
  const std::string dir = testing::scratch_dir();
  data::Image image;
  image.width = image.height = 32;
  image.channels = 3;
  image.pixels.assign(32 * 32 * 3, 128);
  const std::vector<uint8_t> jpeg = data::encode_jpeg(image, 90);
  std::filesystem::create_directories(dir + "/images/train/a");
  std::ofstream(dir + "/images/train/a/x.jpg", std::ios::binary)
      .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
  Config c;
  c.set("model.name", "resnet50");
  c.set("model.num_classes", 1000);
  c.set("data.format", "imagefolder");
  c.set("data.root", dir + "/images");
  c.set("data.image_size", 224);
  c.set("data.batch_size", 1);
  c.set("device", "cpu");
  const ForwardWork work = forward_work(c);
  EXPECT_NEAR(work.macs / 4.09e9, 1.0, 0.02) << work.macs;
  EXPECT_NEAR(training_flops(work) / 24.5e9, 1.0, 0.02);
}

}  // namespace
}  // namespace amptune::train
