// Where a model is placed: model.memory_format's choice (choose_memory_format) on the CPU and on
// CUDA - decided without a GPU -, cuDNN's autotuner switch (cudnn_benchmark, deterministic), and
// Task::place on the CPU with the tiny ResNet (width 1/16: its downsampling convolutions have
// fewer than 8 input channels, which oneDNN cannot run in channels_last) and a wider one.
#include <gtest/gtest.h>

#include <string>

#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "support/tiny_config.h"
#include "train/task.h"

namespace amptune::train {
namespace {

TEST(TrainPlacement, MemoryFormatChoice) {
  const auto kAuto = MemoryFormat::kAuto;
  // CUDA: channels_last where the policy computes in fp16/bf16 kernels, NCHW in fp32.
  auto c = choose_memory_format(kAuto, /*cuda=*/true, /*native_low_precision=*/true, "");
  EXPECT_TRUE(c.channels_last);
  EXPECT_EQ(c.reason, "channels_last (auto: CUDA, native fp16/bf16 kernels)");
  c = choose_memory_format(kAuto, true, false, "");
  EXPECT_FALSE(c.channels_last);
  EXPECT_EQ(c.reason, "contiguous (auto: CUDA in fp32)");
  // The CPU: channels_last unless oneDNN cannot run a convolution in it, whatever the policy.
  for (bool native : {false, true}) {
    EXPECT_TRUE(choose_memory_format(kAuto, false, native, "").channels_last);
    c = choose_memory_format(kAuto, false, native,
                             "layer2.0.downsample (1x1, stride 2, 4 input "
                             "channels)");
    EXPECT_FALSE(c.channels_last);
    EXPECT_NE(c.reason.find("layer2.0.downsample"), std::string::npos) << c.reason;
  }
  // Explicit settings win on both; channels_last with a hazard is refused on the CPU only.
  for (bool cuda : {false, true}) {
    EXPECT_FALSE(choose_memory_format(MemoryFormat::kContiguous, cuda, true, "").channels_last);
    EXPECT_TRUE(choose_memory_format(MemoryFormat::kChannelsLast, cuda, false, "").channels_last);
  }
  EXPECT_TRUE(choose_memory_format(MemoryFormat::kChannelsLast, true, false, "conv").channels_last);
  EXPECT_THROW(choose_memory_format(MemoryFormat::kChannelsLast, false, false, "conv"),
               ConfigError);
}

TEST(TrainPlacement, CudnnBenchmarkOnlyOnCudaAndNeverWhenDeterministic) {
  EXPECT_TRUE(cudnn_benchmark_on(/*cuda=*/true, /*cudnn_benchmark=*/true, /*deterministic=*/false));
  EXPECT_FALSE(cudnn_benchmark_on(true, true, true));
  EXPECT_FALSE(cudnn_benchmark_on(true, false, false));
  for (bool key : {false, true}) {
    for (bool det : {false, true}) EXPECT_FALSE(cudnn_benchmark_on(false, key, det));
  }
  // The keys' defaults: on, not deterministic.
  const Settings s = Settings::from(testing::tiny_config());
  EXPECT_TRUE(s.cudnn_benchmark);
  EXPECT_FALSE(s.deterministic);
}

TEST(TrainPlacement, PlaceOnTheCpu) {
  const bool before = at::globalContext().benchmarkCuDNN();
  for (const char* level : {"O0", "O2"}) {
    Config config = testing::tiny_config();
    config.set_yaml("amp.opt_level", level, SourceLoc{"t"});
    // The tiny width: NCHW, saying why.
    auto task = make_task(Settings::from(config));
    task->place(torch::kCPU);
    EXPECT_EQ(task->memory_format(), torch::MemoryFormat::Contiguous);
    EXPECT_NE(task->memory_format_reason().find("auto: CPU, oneDNN cannot run"), std::string::npos)
        << task->memory_format_reason();
    // A width whose convolutions all have 8 input channels or more: channels_last.
    config.set("model.width", 0.5);
    task = make_task(Settings::from(config));
    task->place(torch::kCPU);
    EXPECT_EQ(task->memory_format(), torch::MemoryFormat::ChannelsLast);
    EXPECT_EQ(task->memory_format_reason(), "channels_last (auto: CPU, oneDNN)");
  }
  EXPECT_EQ(at::globalContext().benchmarkCuDNN(), before);  // the CPU leaves cuDNN alone
}

}  // namespace
}  // namespace amptune::train
