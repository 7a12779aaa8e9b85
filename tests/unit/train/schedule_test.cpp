#include <cmath>

#include <gtest/gtest.h>

#include "core/config.h"
#include "core/settings.h"
#include "train/schedule.h"

namespace amptune::train {
namespace {

TEST(TrainSchedule, RootNetStepDecayAtEpoch17) {
  // REFERENCE: lr0 1e-3, lr_dec_epoch [17], factor 10 -> epochs 0-16 1e-3, 17-19 1e-4.
  Schedule s;
  s.lr0 = 1e-3;
  s.lr_dec_epoch = {17};
  s.lr_dec_factor = 10;
  s.epochs = 20;
  EXPECT_DOUBLE_EQ(s.lr_at(0, 0, 100), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(16, 99, 100), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(17, 0, 100), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(19, 50, 100), 1e-4);
}

TEST(TrainSchedule, SeveralDecaysCountEntriesUpToTheEpoch) {
  Schedule s;
  s.lr0 = 0.1;
  s.lr_dec_epoch = {30, 60, 90};
  s.lr_dec_factor = 10;
  s.epochs = 100;
  EXPECT_DOUBLE_EQ(s.lr_at(29, 0, 10), 0.1);
  EXPECT_NEAR(s.lr_at(30, 0, 10), 0.01, 1e-15);
  EXPECT_NEAR(s.lr_at(60, 0, 10), 0.001, 1e-15);
  EXPECT_NEAR(s.lr_at(99, 9, 10), 0.0001, 1e-15);
}

TEST(TrainSchedule, CosineGoesFromLr0TowardsZero) {
  Schedule s;
  s.lr0 = 0.2;
  s.policy = LrPolicy::kCosine;
  s.epochs = 2;
  EXPECT_DOUBLE_EQ(s.lr_at(0, 0, 10), 0.2);
  EXPECT_NEAR(s.lr_at(1, 0, 10), 0.1, 1e-12);  // half way
  EXPECT_LT(s.lr_at(1, 9, 10), 0.01);
  EXPECT_GT(s.lr_at(1, 9, 10), 0.0);
}

TEST(TrainSchedule, WarmupRampsLinearlyThenHandsOver) {
  Schedule s;
  s.lr0 = 1.0;
  s.warmup_epochs = 1;
  s.epochs = 3;
  EXPECT_DOUBLE_EQ(s.lr_at(0, 0, 4), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(0, 3, 4), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1, 0, 4), 1.0);
}

TEST(TrainSchedule, FromSettingsReadsTheScheduleKeys) {
  Config c;
  c.set("optim.lr", 0.001);
  c.set("schedule.lr_dec_epoch", nlohmann::json::array({17}));
  c.set("schedule.epochs", 20);
  auto s = Schedule::from(Settings::from(c));
  EXPECT_DOUBLE_EQ(s.lr_at(16, 0, 1), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(17, 0, 1), 1e-4);
}

}  // namespace
}  // namespace amptune::train
