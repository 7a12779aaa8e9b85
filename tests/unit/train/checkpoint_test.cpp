// Checkpoint files: round trip of model + optimizer state, byte determinism, and the errors for
// missing, truncated, corrupt and foreign files.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "train/checkpoint.h"

namespace amptune::train {
namespace {
namespace fs = std::filesystem;

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(torch::Tensor x) { return bn->forward(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

std::string dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::path(::testing::TempDir()) / "amptune-ckpt" / info->name();
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A few Adam steps so that parameters, BN buffers and optimizer state are all non-trivial.
void train_some(Net& net, torch::optim::Optimizer& opt, int steps) {
  torch::manual_seed(7);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    auto loss = net.forward(torch::randn({8, 4})).pow(2).mean();
    loss.backward();
    opt.step();
  }
}

void expect_equal_modules(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
  auto ba = a.named_buffers(), bb = b.named_buffers();
  for (auto& p : ba) EXPECT_TRUE(torch::equal(p.value(), bb[p.key()])) << p.key();
}

TEST(TrainCheckpoint, RoundTripRestoresModelOptimizerAndContinuesIdentically) {
  const std::string d = dir();
  torch::manual_seed(1);
  Net a;
  torch::optim::Adam opt_a(a.parameters(), torch::optim::AdamOptions(0.01));
  train_some(a, opt_a, 3);
  auto file = save_checkpoint(d + "/a.pt", a, opt_a, CheckpointMeta{4, 3, "cfg"});
  EXPECT_EQ(file.bytes, static_cast<int64_t>(fs::file_size(d + "/a.pt")));
  EXPECT_EQ(file.sha256.size(), 64u);

  torch::manual_seed(2);  // different init: everything must come from the file
  Net b;
  torch::optim::Adam opt_b(b.parameters(), torch::optim::AdamOptions(0.01));
  auto meta = load_checkpoint(file, b, opt_b, {"cfg"});
  EXPECT_EQ(meta.epoch, 4);
  EXPECT_EQ(meta.global_step, 3);
  expect_equal_modules(a, b);

  // Continuing both gives identical weights: the Adam moments and step counts came along.
  train_some(a, opt_a, 2);
  train_some(b, opt_b, 2);
  expect_equal_modules(a, b);

  // Equal states serialise to equal bytes (no addresses or hash order in the file).
  auto fa = save_checkpoint(d + "/a2.pt", a, opt_a, CheckpointMeta{5, 5, "cfg"});
  auto fb = save_checkpoint(d + "/b2.pt", b, opt_b, CheckpointMeta{5, 5, "cfg"});
  EXPECT_EQ(fa.sha256, fb.sha256);
}

TEST(TrainCheckpoint, SgdMomentumSurvives) {
  const std::string d = dir();
  Net a, b;
  torch::optim::SGD opt_a(a.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt_b(b.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train_some(a, opt_a, 2);
  auto file = save_checkpoint(d + "/s.pt", a, opt_a, CheckpointMeta{0, 2, "h"});
  load_checkpoint(file, b, opt_b, {"h"});
  train_some(a, opt_a, 2);
  train_some(b, opt_b, 2);
  expect_equal_modules(a, b);
}

// A checkpoint written by a run on the GPU opens on the CPU and the other way round: tensors are
// read onto the CPU, the model returns to its device, the optimizer state follows its parameters.
// Needs CUDA (tools/gpu-check.sh runs it there); skipped elsewhere.
TEST(TrainCheckpoint, MovesBetweenCpuAndCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string d = dir();
  const torch::Device cuda(torch::kCUDA, 0);
  auto momentum_device = [](torch::optim::SGD& opt) {
    auto& st = static_cast<torch::optim::SGDParamState&>(*opt.state().begin()->second);
    return st.momentum_buffer().device();
  };
  Net cpu_net;
  torch::optim::SGD cpu_opt(cpu_net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train_some(cpu_net, cpu_opt, 2);
  auto from_cpu = save_checkpoint(d + "/cpu.pt", cpu_net, cpu_opt, CheckpointMeta{0, 2, "h"});

  Net gpu_net;
  gpu_net.to(cuda);
  torch::optim::SGD gpu_opt(gpu_net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  load_checkpoint(from_cpu, gpu_net, gpu_opt, {"h"});
  for (const auto& p : gpu_net.parameters()) EXPECT_TRUE(p.is_cuda());
  for (const auto& b : gpu_net.buffers()) EXPECT_TRUE(b.is_cuda());
  EXPECT_TRUE(momentum_device(gpu_opt).is_cuda());
  for (auto& p : gpu_net.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value().cpu(), cpu_net.named_parameters()[p.key()])) << p.key();
  }
  // A step on the GPU with the restored momentum, then back to a CPU model.
  gpu_opt.zero_grad();
  gpu_net.forward(torch::randn({8, 4}, cuda)).pow(2).mean().backward();
  gpu_opt.step();
  auto from_gpu = save_checkpoint(d + "/gpu.pt", gpu_net, gpu_opt, CheckpointMeta{1, 3, "h"});
  Net cpu_again;
  torch::optim::SGD cpu_again_opt(cpu_again.parameters(),
                                  torch::optim::SGDOptions(0.1).momentum(0.9));
  load_checkpoint(from_gpu, cpu_again, cpu_again_opt, {"h"});
  for (const auto& p : cpu_again.parameters()) EXPECT_FALSE(p.is_cuda());
  EXPECT_FALSE(momentum_device(cpu_again_opt).is_cuda());
  for (auto& p : gpu_net.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value().cpu(), cpu_again.named_parameters()[p.key()])) << p.key();
  }
}

TEST(TrainCheckpoint, MissingTruncatedCorruptAndForeignFilesAreErrors) {
  const std::string d = dir();
  Net a;
  torch::optim::SGD opt(a.parameters(), torch::optim::SGDOptions(0.1));
  auto file = save_checkpoint(d + "/c.pt", a, opt, CheckpointMeta{0, 0, "mine"});

  auto expect_error = [&](const store::CheckpointFile& f, const std::string& hash,
                          const std::string& needle) {
    try {
      load_checkpoint(f, a, opt, {hash});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(f.path), std::string::npos) << e.what();
    }
  };
  expect_error(file, "theirs", "belongs to config");

  store::CheckpointFile missing = file;
  missing.path = d + "/nope.pt";
  expect_error(missing, "mine", "missing");

  fs::copy_file(file.path, d + "/flip.pt");
  {
    std::fstream f(d + "/flip.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(file.bytes / 2));
    f.put('\x5a');
  }
  store::CheckpointFile flipped = file;
  flipped.path = d + "/flip.pt";
  expect_error(flipped, "mine", "sha256");

  fs::copy_file(file.path, d + "/short.pt");
  fs::resize_file(d + "/short.pt", 64);
  store::CheckpointFile truncated = file;
  truncated.path = d + "/short.pt";
  expect_error(truncated, "mine", "truncated");

  // Without a recorded hash the archive reader itself must reject the garbage.
  truncated.bytes = 0;
  truncated.sha256.clear();
  expect_error(truncated, "mine", "cannot be read");
}

TEST(TrainCheckpoint, AtomicWriteLeavesNoTempFileAndReportsUnwritablePaths) {
  const std::string d = dir();
  write_file_atomic(d + "/x/y.bin", "hello");
  std::ifstream in(d + "/x/y.bin");
  std::string s;
  in >> s;
  EXPECT_EQ(s, "hello");
  int files = 0;
  for (auto& e : fs::directory_iterator(d + "/x")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // A path below a regular file cannot be created.
  try {
    write_file_atomic(d + "/x/y.bin/z.bin", "data");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("y.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amptune::train
