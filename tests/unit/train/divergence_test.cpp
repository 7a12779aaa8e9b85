// The divergence rule (train/divergence.h) over scripted per-step loss curves: the same steps
// give the same outcome however they are grouped into epochs and wherever the run is stopped and
// continued, as long as each continuation starts from the streak the epoch before recorded.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "train/divergence.h"

namespace amptune::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A curve from pieces: {count, value}, in order.
std::vector<double> curve(const std::vector<std::pair<int, double>>& pieces) {
  std::vector<double> losses;
  for (const auto& [count, value] : pieces) losses.insert(losses.end(), count, value);
  return losses;
}

struct Outcome {
  std::optional<size_t> diverged_at;  // index of the step whose loss ended the run
  std::string message;
  int64_t end_streak = 0;            // the last recorded epoch's streak (the metric)
  std::vector<int64_t> epoch_streaks;  // each completed epoch's recorded streak
};

// The losses fed in epochs of `epoch_steps`, every epoch by a new watch that continues from the
// streak the previous epoch recorded (a run stopped and resumed at every epoch boundary); 0 as
// the epoch length: one watch over the whole curve (a run that never stopped).
Outcome run(const std::vector<double>& losses, size_t epoch_steps, bool static_scale) {
  Outcome out;
  DivergenceWatch watch;
  for (size_t i = 0; i < losses.size(); ++i) {
    if (epoch_steps > 0 && i > 0 && i % epoch_steps == 0) {
      out.epoch_streaks.push_back(watch.streak());  // recorded with the epoch ...
      watch = DivergenceWatch(out.epoch_streaks.back());  // ... and read back on resume
    }
    out.message = watch.observe(losses[i], static_scale);
    if (!out.message.empty()) {
      out.diverged_at = i;
      return out;
    }
  }
  out.epoch_streaks.push_back(watch.streak());
  out.end_streak = watch.streak();
  return out;
}

struct Case {
  const char* name;
  std::vector<double> losses;
  std::optional<size_t> dynamic_diverges_at, static_diverges_at;
  int64_t dynamic_end_streak;  // when the dynamic run does not diverge
};

std::vector<Case> cases() {
  return {
      // NaN from step 30 on: the 100th in a row (step 129) ends a dynamic run.
      {"nan_from_30", curve({{30, 2.0}, {150, kNaN}}), 129, 30, 0},
      // NaN only at the very end: no divergence; the last epoch ends inside a streak of 10.
      {"nan_at_end", curve({{390, 2.0}, {10, kNaN}}), std::nullopt, 390, 10},
      // Short bursts that recover: a finite loss ends each streak.
      {"bursts", curve({{50, 2.0}, {60, kNaN}, {10, 1.5}, {60, kInf}, {20, 1.0}}), std::nullopt,
       50, 0},
      // 99 in a row, one finite loss, then 100: only the second streak diverges (step 214).
      {"ninety_nine_then_hundred", curve({{15, 2.0}, {99, kNaN}, {1, 1.0}, {100, -kInf}}), 214,
       15, 0},
      // A streak that crosses two 20-step epochs and a 200-step one (steps 185..284).
      {"across_boundaries", curve({{185, 2.0}, {100, kNaN}, {15, 1.0}}), 284, 185, 0},
      // Exactly 100 at the very end: the last step diverges.
      {"hundred_at_end", curve({{300, 2.0}, {100, kNaN}}), 399, 300, 0},
      // Never non-finite.
      {"clean", curve({{400, 2.0}}), std::nullopt, std::nullopt, 0},
  };
}

// Every grouping gives the divergence step and end streak of the run that never stopped, and
// that is the one the rule states.
TEST(DivergenceWatch, TheOutcomeIsThatOfTheStepsWhateverTheEpochsAndResumes) {
  for (const Case& c : cases()) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (static_scale ? " static" : " dynamic"));
      const Outcome whole = run(c.losses, 0, static_scale);
      EXPECT_EQ(whole.diverged_at, static_scale ? c.static_diverges_at : c.dynamic_diverges_at);
      if (!whole.diverged_at) {
        EXPECT_EQ(whole.end_streak, static_scale ? 0 : c.dynamic_end_streak);
      }
      for (const size_t epoch_steps : {1, 7, 20, 200}) {
        SCOPED_TRACE("epochs of " + std::to_string(epoch_steps) + " steps");
        const Outcome grouped = run(c.losses, epoch_steps, static_scale);
        EXPECT_EQ(grouped.diverged_at, whole.diverged_at);
        EXPECT_EQ(grouped.message, whole.message);
        EXPECT_EQ(grouped.end_streak, whole.end_streak);
      }
    }
  }
}

// The recorded streak at each epoch's end is the count of inf/NaN losses in a row up to that
// step over the whole curve, earlier epochs included: with 20-step epochs the NaNs of steps
// 30..179 are 10, 30, ..., 90 at the ends of epochs 1..5 and the run diverges in epoch 6.
TEST(DivergenceWatch, EachEpochRecordsTheStreakSoFarCountingEarlierEpochs) {
  const Outcome o = run(curve({{30, 2.0}, {150, kNaN}}), 20, /*static_scale=*/false);
  EXPECT_EQ(o.epoch_streaks, (std::vector<int64_t>{0, 10, 30, 50, 70, 90}));
  ASSERT_EQ(o.diverged_at, 129u);
  EXPECT_NE(o.message.find("100 steps in a row"), std::string::npos) << o.message;

  // The last epoch ends inside a streak: what tune reads from the metric.
  const Outcome end = run(curve({{390, 2.0}, {10, kNaN}}), 200, false);
  EXPECT_EQ(end.epoch_streaks, (std::vector<int64_t>{0, 10}));
}

// A static scale diverges at the first inf/NaN loss whatever the streak it continues from; a
// dynamic one continues the count of the run it resumes.
TEST(DivergenceWatch, AResumedStreakCounts) {
  DivergenceWatch dynamic(99);
  EXPECT_NE(dynamic.observe(kNaN, false), "");
  DivergenceWatch recovered(99);
  EXPECT_EQ(recovered.observe(1.0, false), "");
  EXPECT_EQ(recovered.streak(), 0);
  EXPECT_EQ(recovered.observe(kNaN, false), "");
  EXPECT_EQ(recovered.streak(), 1);
  DivergenceWatch fresh;
  const std::string message = fresh.observe(kInf, true);
  EXPECT_NE(message.find("train_loss became inf"), std::string::npos) << message;
}

}  // namespace
}  // namespace amptune::train
