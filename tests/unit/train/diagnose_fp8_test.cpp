// The FP8 rows of `amptune diagnose` on constructed tensors with known answers (saturated and
// flushed shares, SQNR, amax), the watch on an Fp8State, and the FP8 advice rules on constructed
// rows (docs/AMP.md "FP8 advice rules"), each rule and the edges of its thresholds.
#include "train/diagnose_fp8.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "amp/fp8.h"

namespace amptune::train {
namespace {

using records::AdviceRule;
using records::Fp8DiagnosticRow;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(DiagnoseFp8Stats, SaturatedAndFlushedSharesAndAmax) {
  // Scale 1, E4M3: 500 and -1000 and inf saturate (beyond 448); 1e-4 and -5e-4 flush (below
  // half the smallest subnormal, 2^-10); 0 is neither; NaN is neither and is left out.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto x = torch::tensor({500.0f, -1000.0f, inf, 1e-4f, -5e-4f, 0.0f, 1.0f, nan});
  const Fp8DiagnosticRow r = fp8_tensor_row(x, 1.0f, amp::Fp8Format::kE4M3);
  EXPECT_EQ(r.numel, 8);
  EXPECT_EQ(r.format, "e4m3");
  EXPECT_DOUBLE_EQ(r.saturated_frac, 3.0 / 8);
  EXPECT_DOUBLE_EQ(r.flushed_frac, 2.0 / 5);  // of the nonzero finite values: 500, -1000, ...
  EXPECT_DOUBLE_EQ(r.amax, 1000.0);
  EXPECT_DOUBLE_EQ(r.scale, 1.0);
  EXPECT_TRUE(std::isnan(r.history_min));
  // The same values scaled down by 4 fit: nothing saturates, more flushes.
  const Fp8DiagnosticRow s = fp8_tensor_row(x, 0.25f, amp::Fp8Format::kE4M3);
  EXPECT_DOUBLE_EQ(s.saturated_frac, 1.0 / 8);  // only inf
  EXPECT_DOUBLE_EQ(s.flushed_frac, 2.0 / 5);
}

TEST(DiagnoseFp8Stats, SqnrOfKnownErrors) {
  // Values on the E4M3 grid quantise exactly: no error, NaN.
  const Fp8DiagnosticRow exact =
      fp8_tensor_row(torch::tensor({1.0f, -2.0f, 0.5f, 448.0f}), 1.0f, amp::Fp8Format::kE4M3);
  EXPECT_TRUE(std::isnan(exact.sqnr_db));
  EXPECT_DOUBLE_EQ(exact.saturated_frac, 0.0);
  // 1.0625 rounds to 1 (ties to even between 1 and 1.125 at 1.0625): error 0.0625 on a signal
  // of 1.0625^2 + 1^2 (the exact 1 adds signal, no error).
  const Fp8DiagnosticRow r =
      fp8_tensor_row(torch::tensor({1.0625f, 1.0f}), 1.0f, amp::Fp8Format::kE4M3);
  const double expected = 10 * std::log10((1.0625 * 1.0625 + 1.0) / (0.0625 * 0.0625));
  EXPECT_NEAR(r.sqnr_db, expected, 1e-9);
  // The scale's inverse is applied to the quantised value: with scale 2, 0.53125 -> 1.0625 ->
  // 1 -> 0.5, the same relative error.
  const Fp8DiagnosticRow scaled =
      fp8_tensor_row(torch::tensor({0.53125f, 0.5f}), 2.0f, amp::Fp8Format::kE4M3);
  EXPECT_NEAR(scaled.sqnr_db, expected, 1e-9);
  // Everything flushed: the signal is all noise, 0 dB.
  const Fp8DiagnosticRow lost =
      fp8_tensor_row(torch::full({16}, 5e-6f), 1.0f, amp::Fp8Format::kE5M2);
  EXPECT_DOUBLE_EQ(lost.flushed_frac, 1.0);
  EXPECT_NEAR(lost.sqnr_db, 0.0, 1e-9);
  EXPECT_EQ(lost.format, "e5m2");
}

TEST(DiagnoseFp8Stats, FewHugeValuesSetTheScaleAndTheSmallOnesFlush) {
  // The planted underflow: a per-tensor scale from an amax of 8192 leaves values of 1e-3 at
  // 5.5e-5, below half E4M3's smallest subnormal 2^-9: they flush, though they carry the signal.
  torch::Tensor w = torch::full({1000}, 1e-3f);
  w.index_put_({0}, 8192.0f);
  const float scale = amp::fp8_scale_from_amax(8192.0f, amp::Fp8Format::kE4M3, 0);
  const Fp8DiagnosticRow r = fp8_tensor_row(w, scale, amp::Fp8Format::kE4M3);
  EXPECT_DOUBLE_EQ(r.flushed_frac, 999.0 / 1000);
  EXPECT_DOUBLE_EQ(r.saturated_frac, 0.0);
  EXPECT_GT(r.sqnr_db, 30);  // the energy is the huge value's: SQNR alone cannot tell
}

TEST(DiagnoseFp8Watch, RecordsEachQuantisationWithItsSlotsHistory) {
  amp::Fp8State state(amp::Fp8Scaling{});
  auto slot = state.slot("fc", amp::Fp8Role::kInput, amp::Fp8Format::kE4M3);
  for (const float amax : {2.0f, 8.0f, 4.0f}) {
    slot->scale_for(torch::tensor({amax}));
    state.end_step();
  }
  int calls = 0;
  state.set_observer(std::make_shared<const amp::Fp8Observer>(
      [&](const std::string&, amp::Fp8Role, const torch::Tensor&, float, amp::Fp8Format) {
        ++calls;
      }));
  {
    Fp8Watch watch(state);
    watch.begin_batch(1);
    const auto observer = state.observer();
    (*observer)("fc", amp::Fp8Role::kInput, torch::tensor({100.0f, 1.0f}), slot->scale(),
                amp::Fp8Format::kE4M3);
    (*observer)("fc#1", amp::Fp8Role::kGradOutput, torch::tensor({1.0f}), 1.0f,
                amp::Fp8Format::kE5M2);
    const auto rows = watch.take();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].module, "fc");
    EXPECT_EQ(rows[0].role, "input");
    EXPECT_EQ(rows[0].batch, 1);
    EXPECT_EQ(rows[0].seq, 0);
    EXPECT_EQ(rows[0].history_len, 3);
    EXPECT_DOUBLE_EQ(rows[0].history_min, 2.0);
    EXPECT_DOUBLE_EQ(rows[0].history_max, 8.0);
    EXPECT_DOUBLE_EQ(rows[0].scale, 448.0f / 8.0f);
    EXPECT_DOUBLE_EQ(rows[0].saturated_frac, 0.5);  // 100 x 56 > 448
    EXPECT_EQ(rows[1].seq, 1);
    EXPECT_EQ(rows[1].role, "grad_output");
    EXPECT_EQ(rows[1].history_len, 0);  // no slot of that key
    EXPECT_TRUE(watch.take().empty());
    EXPECT_EQ(calls, 2);  // the observer it found still sees every quantisation
    // A step ends between two batches (diagnose advances the state as training would): the
    // next batch's rows carry the history as it is then.
    slot->scale_for(torch::tensor({64.0f}));
    state.end_step();
    watch.begin_batch(2);
    (*observer)("fc", amp::Fp8Role::kInput, torch::tensor({1.0f}), slot->scale(),
                amp::Fp8Format::kE4M3);
    const auto next = watch.take();
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].batch, 2);
    EXPECT_EQ(next[0].seq, 0);
    EXPECT_EQ(next[0].history_len, 4);
    EXPECT_DOUBLE_EQ(next[0].history_max, 64.0);
    EXPECT_DOUBLE_EQ(next[0].scale, 448.0f / 64.0f);
  }
  ASSERT_TRUE(state.observer());  // put back
  (*state.observer())("fc", amp::Fp8Role::kInput, torch::tensor({1.0f}), 1.0f,
                      amp::Fp8Format::kE4M3);
  EXPECT_EQ(calls, 4);
}

// --- the advice rules on constructed rows ------------------------------------------------------

Fp8DiagnosticRow slot(const std::string& module, const std::string& role, int seq) {
  Fp8DiagnosticRow r;
  r.module = module;
  r.role = role;
  r.seq = seq;
  r.format = role == "grad_output" ? "e5m2" : "e4m3";
  r.numel = 100;
  r.sqnr_db = 30;
  r.amax = 10;
  r.scale = 44.8;  // amax 10 lands at the max
  r.history_min = 8;
  r.history_max = 10;
  r.history_len = 16;
  return r;
}

records::DiagnosticRow output(const std::string& module, int seq, double cosine) {
  records::DiagnosticRow r;
  r.kind = records::DiagnosticKind::kForward;
  r.module = module;
  r.seq = seq;
  r.cosine = cosine;
  return r;
}

// Three Linear layers in FP8, every output close to fp32's.
records::Diagnosis healthy() {
  records::Diagnosis d;
  d.cosine_min = 0.99;
  int seq = 0;
  for (const std::string m : {"fc1", "fc2", "head"}) {
    d.fp8_rows.push_back(slot(m, "input", seq++));
    d.fp8_rows.push_back(slot(m, "weight", seq++));
  }
  for (const std::string m : {"head", "fc2", "fc1"}) {
    d.fp8_rows.push_back(slot(m, "grad_output", seq++));
  }
  d.rows = {output("fc1", 0, 0.9995), output("fc2", 1, 0.999), output("head", 2, 0.998),
            output("", 3, 0.998)};
  return d;
}

Fp8DiagnosticRow& row_of(records::Diagnosis& d, const std::string& module,
                         const std::string& role) {
  for (auto& r : d.fp8_rows) {
    if (r.module == module && r.role == role) return r;
  }
  throw std::logic_error("no row " + module + " " + role);
}

std::vector<std::string> described(const std::vector<records::DiagnosisAdvice>& advice) {
  std::vector<std::string> out;
  for (const auto& a : advice) out.push_back(records::to_string(a.rule) + " " + a.module);
  return out;
}

TEST(DiagnoseFp8Advice, HealthyRowsGiveNone) {
  EXPECT_TRUE(advise_fp8(healthy(), {}).empty());
}

TEST(DiagnoseFp8Advice, SmallValuesThatFlushKeepTheModuleOut) {
  records::Diagnosis d = healthy();
  row_of(d, "fc2", "weight").flushed_frac = kFp8FlushedMin;
  // Its output still close (the huge values that set the scale dominate it): named all the same.
  const auto advice = advise_fp8(d, {});
  EXPECT_EQ(described(advice), (std::vector<std::string>{"fp8_keep_out fc2"}));
  EXPECT_NE(advice[0].advice.find("amp.fp8.skip_modules: [fc2]"), std::string::npos)
      << advice[0].advice;
  d.rows[1].cosine = 0.6;  // departing too: one row
  EXPECT_EQ(described(advise_fp8(d, {})), (std::vector<std::string>{"fp8_keep_out fc2"}));
  // Just below the threshold: no flushing rule (the departure rule still names it).
  row_of(d, "fc2", "weight").flushed_frac = kFp8FlushedMin * 0.99;
  const auto below = advise_fp8(d, {});
  ASSERT_EQ(below.size(), 1u);
  EXPECT_NE(below[0].advice.find("departs most"), std::string::npos) << below[0].advice;
}

TEST(DiagnoseFp8Advice, AJumpAboveTheDelayedScaleAsksForCurrentScaling) {
  records::Diagnosis d = healthy();
  Fp8DiagnosticRow& in = row_of(d, "fc1", "input");
  in.amax = 1000;  // 100 x the history's amax: far beyond the max at the delayed scale
  in.saturated_frac = 0.3;
  EXPECT_EQ(described(advise_fp8(d, {})), (std::vector<std::string>{"fp8_current_scaling fc1"}));
  // Under current scaling the scale follows the tensor: no such advice.
  Fp8AdviceContext current;
  current.delayed = false;
  EXPECT_TRUE(advise_fp8(d, current).empty());
}

// The diagnosed batches advance the scales (each batch's from the amaxes before it): the worst
// row's largest amax and smallest scale may come from different batches; the overshoot is that
// of one quantisation.
TEST(DiagnoseFp8Advice, TheOvershootIsThatOfOneBatch) {
  records::Diagnosis d = healthy();
  Fp8DiagnosticRow& big = row_of(d, "fc2", "input");  // a large amax, at a scale made for it
  big.amax = 100;
  big.scale = 4.48;
  Fp8DiagnosticRow jumped = slot("fc2", "input", big.seq);  // the next batch: 4 x beyond the max
  jumped.batch = 1;
  jumped.amax = 40;
  jumped.saturated_frac = kFp8MildSaturation / 2;
  jumped.history_max = 10;
  d.fp8_rows.push_back(jumped);
  // Largest amax x smallest scale is 1 x the max (mild); the second batch's is 4 x.
  const auto advice = advise_fp8(d, {});
  EXPECT_EQ(described(advice), (std::vector<std::string>{"fp8_current_scaling fc2"}));
  EXPECT_NE(advice[0].advice.find("its amax 40 at scale 44.8 lands at 4 x"), std::string::npos)
      << advice[0].advice;
}

// Several modules saturate beyond mild: the one furthest beyond the max first (the move is the
// same; the row it cites is the strongest evidence), each module by its steepest slot.
TEST(DiagnoseFp8Advice, TheSteepestJumpFirst) {
  records::Diagnosis d = healthy();
  Fp8DiagnosticRow& g = row_of(d, "fc1", "grad_output");
  g.amax = 12;  // 1.2 x, but too many values
  g.saturated_frac = 0.05;
  Fp8DiagnosticRow& in = row_of(d, "fc2", "input");
  in.amax = 640;  // 64 x
  in.saturated_frac = 0.5;
  Fp8DiagnosticRow& out = row_of(d, "fc2", "grad_output");
  out.amax = 30;  // 3 x: fc2 is cited by its input, the steeper
  out.saturated_frac = 0.2;
  const auto advice = advise_fp8(d, {});
  EXPECT_EQ(described(advice), (std::vector<std::string>{"fp8_current_scaling fc2",
                                                         "fp8_current_scaling fc1"}));
  EXPECT_NE(advice[0].advice.find("of the input of fc2"), std::string::npos) << advice[0].advice;
}

// A forward departure at or after a module whose input (or weight) saturates beyond mild is the
// saturation's: no fp8_keep_out for it, nor for the head downstream; one before it still is.
TEST(DiagnoseFp8Advice, DeparturesAfterAJumpAreTheJumps) {
  records::Diagnosis d = healthy();
  Fp8DiagnosticRow& in = row_of(d, "fc2", "input");
  in.amax = 640;
  in.saturated_frac = 0.5;
  d.rows[1].cosine = 0.5;  // fc2
  d.rows[2].cosine = 0.6;  // head
  EXPECT_EQ(described(advise_fp8(d, {})),
            (std::vector<std::string>{"fp8_current_scaling fc2"}));
  d.rows[0].cosine = 0.9;  // fc1, upstream: its own
  EXPECT_EQ(described(advise_fp8(d, {})),
            (std::vector<std::string>{"fp8_keep_out fc1", "fp8_current_scaling fc2"}));
  // A saturating output gradient explains no forward departure.
  records::Diagnosis e = healthy();
  Fp8DiagnosticRow& g = row_of(e, "fc2", "grad_output");
  g.amax = 640;
  g.saturated_frac = 0.5;
  e.rows[2].cosine = 0.6;
  EXPECT_EQ(described(advise_fp8(e, {})),
            (std::vector<std::string>{"fp8_keep_out head", "fp8_current_scaling fc2"}));
  // Under current scaling no delayed scale explains them: the head and fc2 (lowest) are named.
  Fp8AdviceContext current;
  current.delayed = false;
  EXPECT_EQ(described(advise_fp8(d, current)),
            (std::vector<std::string>{"fp8_keep_out head", "fp8_keep_out fc2"}));
}

TEST(DiagnoseFp8Advice, SteadyMildSaturationRaisesTheMargin) {
  records::Diagnosis d = healthy();
  Fp8DiagnosticRow& w = row_of(d, "fc2", "weight");
  w.amax = 10 * kFp8MildOvershoot;  // at the edge: twice the max
  w.saturated_frac = kFp8MildSaturation;
  Fp8AdviceContext c;
  c.margin = 2;
  const auto advice = advise_fp8(d, c);
  EXPECT_EQ(described(advice), (std::vector<std::string>{"fp8_raise_margin fc2"}));
  EXPECT_NE(advice[0].advice.find("amp.fp8.margin: 3"), std::string::npos) << advice[0].advice;
  w.amax = 10 * kFp8MildOvershoot * 1.01;  // beyond one more power of two
  EXPECT_EQ(described(advise_fp8(d, c)), (std::vector<std::string>{"fp8_current_scaling fc2"}));
  w.amax = 15;
  w.saturated_frac = kFp8MildSaturation * 1.5;  // mild overshoot, but too many values
  EXPECT_EQ(described(advise_fp8(d, c)), (std::vector<std::string>{"fp8_current_scaling fc2"}));
}

TEST(DiagnoseFp8Advice, AStaleSpikeInTheHistoryShortensIt) {
  records::Diagnosis d = healthy();
  Fp8DiagnosticRow& g = row_of(d, "fc1", "grad_output");
  g.amax = 1;
  g.history_max = kFp8StaleRatio;  // exactly the ratio
  g.scale = 57344 / kFp8StaleRatio;
  g.flushed_frac = 0.2;
  d.rows[0].cosine = 0.5;  // departing or not, the history explains the flushing
  Fp8AdviceContext c;
  c.amax_history_len = 1024;
  const auto advice = advise_fp8(d, c);
  ASSERT_FALSE(advice.empty());
  EXPECT_EQ(described(advice)[0], "fp8_keep_out fc1");  // the departure rule, first by rule order
  EXPECT_EQ(described(advice).back(), "fp8_shorten_history fc1");
  EXPECT_NE(advice.back().advice.find("amp.fp8.amax_history_len: 64"), std::string::npos)
      << advice.back().advice;
  // most_recent takes no maximum over the history; a history of 1 cannot be shorter: the
  // flushing is then the module's own.
  for (const bool max : {false, true}) {
    Fp8AdviceContext other = c;
    other.amax_max = max;
    other.amax_history_len = max ? 1 : 1024;
    const auto got = described(advise_fp8(d, other));
    EXPECT_EQ(got, (std::vector<std::string>{"fp8_keep_out fc1"})) << max;
  }
  g.history_max = kFp8StaleRatio * 0.99;  // below the ratio
  EXPECT_EQ(described(advise_fp8(d, c)), (std::vector<std::string>{"fp8_keep_out fc1"}));
}

TEST(DiagnoseFp8Advice, TheOutputHeadAndTheModuleThatDepartsMost) {
  records::Diagnosis d = healthy();
  d.rows[2].cosine = 0.95;  // head
  auto advice = advise_fp8(d, {});
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(described(advice)[0], "fp8_keep_out head");
  EXPECT_NE(advice[0].advice.find("output head"), std::string::npos) << advice[0].advice;
  d.rows[0].cosine = 0.9;  // fc1 departs more: named too, after the head
  EXPECT_EQ(described(advise_fp8(d, {})),
            (std::vector<std::string>{"fp8_keep_out head", "fp8_keep_out fc1"}));
  d.rows[0].cosine = kNaN;  // lost values are the worst there is
  EXPECT_EQ(described(advise_fp8(d, {})).back(), "fp8_keep_out fc1");
  // The whole model's output ("") departing names no module: it is not in FP8.
  records::Diagnosis e = healthy();
  e.rows[3].cosine = 0.5;
  EXPECT_TRUE(advise_fp8(e, {}).empty());
}

TEST(DiagnoseFp8Advice, WorstRowsPerSlotOverBatchesAndCalls) {
  records::Diagnosis d;
  Fp8DiagnosticRow a = slot("fc#1", "input", 3);
  a.sqnr_db = kNaN;
  Fp8DiagnosticRow b = slot("fc#1", "input", 2);
  b.batch = 1;
  b.saturated_frac = 0.2;
  b.sqnr_db = 12;
  b.history_len = 0;
  b.history_min = b.history_max = kNaN;
  d.fp8_rows = {a, b, slot("fc", "weight", 0)};
  const auto worst = worst_fp8_rows(d);
  ASSERT_EQ(worst.size(), 2u);
  EXPECT_EQ(worst[0].module, "fc");
  EXPECT_EQ(worst[1].module, "fc#1");
  EXPECT_EQ(worst[1].seq, 2);
  EXPECT_EQ(worst[1].batch, 1);
  EXPECT_DOUBLE_EQ(worst[1].saturated_frac, 0.2);
  EXPECT_DOUBLE_EQ(worst[1].sqnr_db, 12);
  EXPECT_EQ(worst[1].history_len, 16);
  EXPECT_DOUBLE_EQ(worst[1].history_max, 10);
  EXPECT_EQ(fp8_slot_module("fc#1"), "fc");
  EXPECT_EQ(fp8_slot_module("blocks.0.attn"), "blocks.0.attn");
}

}  // namespace
}  // namespace amptune::train
