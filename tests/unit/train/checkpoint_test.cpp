// Checkpoint files: round trip of model, optimizer and amp state, byte determinism, the
// safetensors layout, and the errors for missing, truncated, corrupt, crafted, foreign and
// old-format files.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "amp/engine.h"
#include "amp/fp8.h"
#include "amp/policy.h"
#include "core/config.h"
#include "core/settings.h"
#include "core/error.h"
#include "core/process.h"
#include "data/safetensors.h"
#include "support/scratch.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/phases.h"

namespace amptune::train {
namespace {
namespace fs = std::filesystem;
namespace safetensors = data::safetensors;

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(torch::Tensor x) { return bn->forward(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

std::string dir() { return testing::scratch_dir(); }

// The epoch row that names `file` as the database records it: its epoch and global step.
records::EpochRow row_of(const records::CheckpointFile& file, int epoch, int64_t global_step) {
  records::EpochRow row;
  row.epoch = epoch;
  row.global_step = global_step;
  row.checkpoint = file;
  return row;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
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

amp::Policy policy_for(const std::string& level, const std::string& scale = "dynamic") {
  Config c;
  c.set_yaml("amp.opt_level", level, SourceLoc{"t"});
  c.set_yaml("amp.loss_scale", scale, SourceLoc{"t"});
  c.set_yaml("amp.backend", "emulate", SourceLoc{"t"});
  return amp::resolve_policy(Settings::from(c).amp, false);
}

TEST(TrainCheckpoint, RoundTripRestoresModelOptimizerAndContinuesIdentically) {
  const std::string d = dir();
  torch::manual_seed(1);
  Net a;
  torch::optim::Adam opt_a(a.parameters(), torch::optim::AdamOptions(0.01));
  train_some(a, opt_a, 3);
  auto file = save_checkpoint(d + "/a.safetensors", a, opt_a, CheckpointMeta{4, 3, "cfg"});
  EXPECT_EQ(file.bytes, static_cast<int64_t>(fs::file_size(d + "/a.safetensors")));
  EXPECT_EQ(file.sha256.size(), 64u);
  const torch::Tensor next_draw = torch::rand({4});  // the generator's draw after the save

  torch::manual_seed(2);  // different init: everything must come from the file
  Net b;
  torch::optim::Adam opt_b(b.parameters(), torch::optim::AdamOptions(0.01));
  auto meta = load_checkpoint(row_of(file, 4, 3), b, opt_b, {"cfg"});
  EXPECT_TRUE(torch::equal(torch::rand({4}), next_draw));  // the generator's state came back
  EXPECT_EQ(meta.epoch, 4);
  EXPECT_EQ(meta.global_step, 3);
  expect_equal_modules(a, b);
  for (const auto& p : b.parameters()) {
    const auto& st = static_cast<torch::optim::AdamParamState&>(*opt_b.state().at(
        optimizer_state_key<std::remove_reference_t<decltype(opt_b.state())>>(p)));
    EXPECT_EQ(st.step(), 3);
  }

  // Continuing both gives identical weights: the Adam moments and step counts came along.
  train_some(a, opt_a, 2);
  train_some(b, opt_b, 2);
  expect_equal_modules(a, b);

  // Equal states serialise to equal bytes (no addresses or hash order in the file).
  auto fa = save_checkpoint(d + "/a2.safetensors", a, opt_a, CheckpointMeta{5, 5, "cfg"});
  auto fb = save_checkpoint(d + "/b2.safetensors", b, opt_b, CheckpointMeta{5, 5, "cfg"});
  EXPECT_EQ(fa.sha256, fb.sha256);
}

TEST(TrainCheckpoint, SgdMomentumSurvives) {
  const std::string d = dir();
  Net a, b;
  torch::optim::SGD opt_a(a.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt_b(b.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train_some(a, opt_a, 2);
  auto file = save_checkpoint(d + "/s.safetensors", a, opt_a, CheckpointMeta{0, 2, "h"});
  load_checkpoint(row_of(file, 0, 2), b, opt_b, {"h"});
  EXPECT_EQ(opt_b.state().size(), 4u);  // fc.weight, fc.bias, bn.weight, bn.bias
  train_some(a, opt_a, 2);
  train_some(b, opt_b, 2);
  expect_equal_modules(a, b);
  // The state of another optimizer kind is refused (and says why).
  torch::optim::Adam adam(b.parameters(), torch::optim::AdamOptions(0.01));
  try {
    load_checkpoint(row_of(file, 0, 2), b, adam, {"h"});
    ADD_FAILURE() << "an SGD checkpoint loaded into Adam";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("another optim.name"), std::string::npos) << e.what();
  }
}

// A link planted where the save's temp file goes (<path>.tmp.<pid>) is not written through: the
// link goes, its target stays, the checkpoint is written.
TEST(TrainCheckpoint, ALinkAtTheTempFileIsNotWrittenThrough) {
  const std::string d = dir();
  const std::string victim = d + "/victim.txt";
  { std::ofstream(victim) << "precious"; }
  const std::string path = d + "/t.safetensors";
  std::filesystem::create_symlink(victim, path + ".tmp." + std::to_string(::getpid()));
  Net a;
  torch::optim::SGD opt(a.parameters(), torch::optim::SGDOptions(0.1));
  const auto file = save_checkpoint(path, a, opt, CheckpointMeta{0, 0, "h"});
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  EXPECT_TRUE(std::filesystem::is_regular_file(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  EXPECT_GT(file.bytes, 0);
}

// The file is plain safetensors: an 8-byte little-endian header length, a JSON header padded to 8
// bytes with the documented names, dtypes, shapes and metadata, then the raw tensor bytes.
TEST(TrainCheckpoint, FileIsSafetensorsWithTheDocumentedNames) {
  const std::string d = dir();
  Net a;
  torch::optim::Adam opt(a.parameters(), torch::optim::AdamOptions(0.01));
  train_some(a, opt, 2);
  const auto file = save_checkpoint(d + "/c.safetensors", a, opt, CheckpointMeta{6, 2, "abc"});
  const std::string bytes = read_bytes(file.path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const auto& meta = header.at("__metadata__");
  EXPECT_EQ(meta.at("format"), "amptune-checkpoint-2");
  EXPECT_EQ(meta.at("epoch"), "6");
  EXPECT_EQ(meta.at("global_step"), "2");
  EXPECT_EQ(meta.at("config_hash"), "abc");
  EXPECT_EQ(meta.at("optimizer"), "adam");
  const auto& w = header.at("model.fc.weight");
  EXPECT_EQ(w.at("dtype"), "F32");
  EXPECT_EQ(w.at("shape"), nlohmann::json({3, 4}));
  const uint64_t begin = w.at("data_offsets")[0], end = w.at("data_offsets")[1];
  ASSERT_EQ(end - begin, 48u);
  torch::Tensor expect = a.fc->weight.detach().contiguous();
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + begin, expect.data_ptr(), 48), 0);
  EXPECT_EQ(header.at("model.bn.num_batches_tracked").at("dtype"), "I64");
  EXPECT_EQ(header.at("optim.p0.step").at("shape"), nlohmann::json::array());
  EXPECT_EQ(header.at("optim.p0.exp_avg_sq").at("shape"), nlohmann::json({3, 4}));
  EXPECT_EQ(header.at("rng.cpu").at("dtype"), "U8");
  // 4 parameters + 3 BatchNorm buffers + 4 x 3 Adam tensors + rng + metadata.
  EXPECT_EQ(header.size(), 21u);
}

TEST(TrainCheckpoint, AmpMastersAndScalerRoundTripAndMismatchesAreRefused) {
  const std::string d = dir();
  torch::manual_seed(3);
  Net a, b, c, plain;
  amp::Engine ea(policy_for("O2"), a), eb(policy_for("O2"), b), o3(policy_for("O3"), c);
  torch::optim::SGD opt_a(ea.optimizer_params(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt_b(eb.optimizer_params(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt_c(o3.optimizer_params(), torch::optim::SGDOptions(0.1).momentum(0.9));
  ea.scaler().load_state({2048.0, 5});
  {
    torch::NoGradGuard no_grad;
    ea.masters()[0].add_(0.125);  // a master that differs from its fp16-grid weight
  }
  const auto file =
      save_checkpoint(d + "/o2.safetensors", a, opt_a, CheckpointMeta{0, 1, "h"}, &ea);
  load_checkpoint(row_of(file, 0, 1), b, opt_b, {"h"}, &eb);
  EXPECT_EQ(eb.scaler().scale(), 2048.0);
  EXPECT_EQ(eb.scaler().state().unskipped, 5);
  ASSERT_TRUE(eb.masters()[0].defined());
  EXPECT_TRUE(torch::equal(ea.masters()[0], eb.masters()[0]));
  expect_equal_modules(a, b);

  auto expect_refused = [&](const records::CheckpointFile& f, torch::nn::Module& m,
                            torch::optim::Optimizer& o, amp::Engine& e, const std::string& needle) {
    try {
      load_checkpoint(row_of(f, 0, 1), m, o, {"h"}, &e);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const CheckpointError& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  // O2 masters do not fit an O3 run (none), and a checkpoint without amp state does not fit a
  // dynamically scaled run.
  expect_refused(file, c, opt_c, o3, "amp.master.0");
  torch::optim::SGD opt_plain(plain.parameters(), torch::optim::SGDOptions(0.1));
  const auto no_amp =
      save_checkpoint(d + "/fp32.safetensors", plain, opt_plain, CheckpointMeta{0, 0, "h"});
  expect_refused(no_amp, c, opt_c, o3, "no mixed-precision state");
}

// The FP8 scaling state (amp::Fp8State::to_tensors) goes into the file and back; a run without
// FP8 leaves it, a run with FP8 loading a file without it starts with empty histories, and a bad
// history is a CheckpointError naming the file and the tensor.
TEST(TrainCheckpoint, Fp8StateRoundTripsAndIsCheckedAsUntrustedInput) {
  const std::string d = dir();
  Config c;
  c.set_yaml("amp.fp8.enabled", "true", SourceLoc{"t"});
  c.set_yaml("amp.fp8.amax_history_len", "8", SourceLoc{"t"});
  const amp::Policy fp8 = amp::resolve_policy(Settings::from(c).amp, false);
  torch::manual_seed(4);
  Net a, b, plain;
  amp::Engine ea(fp8, a), eb(fp8, b), none(policy_for("O0", "1"), plain);
  torch::optim::SGD opt_a(ea.optimizer_params(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD opt_b(eb.optimizer_params(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD opt_plain(none.optimizer_params(), torch::optim::SGDOptions(0.1));
  const auto slot = [](amp::Engine& e) {
    return e.fp8()->slot("fc", amp::Fp8Role::kInput, amp::Fp8Format::kE4M3);
  };
  for (float amax : {3.0f, 5.0f, 0.5f}) {
    slot(ea)->scale_for(torch::tensor({amax, -amax / 2}));
    ea.fp8()->end_step();
  }
  slot(eb)->scale_for(torch::tensor({7.0f}));
  eb.fp8()->end_step();  // replaced by the file's
  const auto file = save_checkpoint(d + "/fp8.safetensors", a, opt_a, CheckpointMeta{0, 3, "h"},
                                    &ea);
  load_checkpoint(row_of(file, 0, 3), b, opt_b, {"h"}, &eb);
  EXPECT_EQ(slot(eb)->history(), (std::vector<float>{3.0f, 5.0f, 0.5f}));
  EXPECT_EQ(slot(eb)->scale(), slot(ea)->scale());
  EXPECT_EQ(slot(eb)->scale(), 448.0f / 5.0f);

  load_checkpoint(row_of(file, 0, 3), plain, opt_plain, {"h"}, &none);  // leaves fp8.*
  const auto no_fp8 = save_checkpoint(d + "/plain.safetensors", plain, opt_plain,
                                      CheckpointMeta{0, 3, "h"}, &none);
  load_checkpoint(row_of(no_fp8, 0, 3), b, opt_b, {"h"}, &eb);
  EXPECT_TRUE(eb.fp8()->to_tensors().empty());
  EXPECT_TRUE(slot(eb)->history().empty());

  slot(ea)->restore({2.0f, -1.0f});  // no amax is negative
  const auto bad = save_checkpoint(d + "/bad.safetensors", a, opt_a, CheckpointMeta{0, 3, "h"},
                                   &ea);
  try {
    load_checkpoint(row_of(bad, 0, 3), b, opt_b, {"h"}, &eb);
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find("fp8.fc.input.history"), std::string::npos) << what;
  }
}

// A checkpoint written by a run on the GPU opens on the CPU and the other way round: tensors are
// read onto the CPU, the model keeps its device, the optimizer state follows its parameters.
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
  auto from_cpu =
      save_checkpoint(d + "/cpu.safetensors", cpu_net, cpu_opt, CheckpointMeta{0, 2, "h"});

  Net gpu_net;
  gpu_net.to(cuda);
  torch::optim::SGD gpu_opt(gpu_net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  load_checkpoint(row_of(from_cpu, 0, 2), gpu_net, gpu_opt, {"h"});
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
  auto from_gpu =
      save_checkpoint(d + "/gpu.safetensors", gpu_net, gpu_opt, CheckpointMeta{1, 3, "h"});
  Net cpu_again;
  torch::optim::SGD cpu_again_opt(cpu_again.parameters(),
                                  torch::optim::SGDOptions(0.1).momentum(0.9));
  load_checkpoint(row_of(from_gpu, 1, 3), cpu_again, cpu_again_opt, {"h"});
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
  auto file = save_checkpoint(d + "/c.safetensors", a, opt, CheckpointMeta{0, 0, "mine"});

  auto expect_error = [&](const records::CheckpointFile& f, const std::string& hash,
                          const std::string& needle) {
    try {
      load_checkpoint(row_of(f, 0, 0), a, opt, {hash});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(f.path), std::string::npos) << e.what();
    }
  };
  expect_error(file, "theirs", "belongs to config");

  records::CheckpointFile missing = file;
  missing.path = d + "/nope.safetensors";
  expect_error(missing, "mine", "missing");

  fs::copy_file(file.path, d + "/flip.safetensors");
  {
    std::fstream f(d + "/flip.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(file.bytes / 2));
    f.put('\x5a');
  }
  records::CheckpointFile flipped = file;
  flipped.path = d + "/flip.safetensors";
  expect_error(flipped, "mine", "sha256");

  fs::copy_file(file.path, d + "/short.safetensors");
  fs::resize_file(d + "/short.safetensors", 64);
  records::CheckpointFile truncated = file;
  truncated.path = d + "/short.safetensors";
  expect_error(truncated, "mine", "truncated");

  // Without a recorded hash (a merged or copied-in row) the reader itself rejects the rest.
  truncated.bytes = 0;
  truncated.sha256.clear();
  expect_error(truncated, "mine", "truncated");
  write_bytes(truncated.path, "");
  expect_error(truncated, "mine", "too short");
}

// Files made by hand from a good one: every violation of the layout or of what the run expects is
// a CheckpointError that names the file, and the model and optimizer are left as they were.
class CraftedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = dir();
    torch::manual_seed(4);
    train_some(net_, opt_, 2);
    good_ = read_bytes(
        save_checkpoint(d_ + "/good.safetensors", net_, opt_, CheckpointMeta{1, 2, "mine"}).path);
    uint64_t n = 0;
    std::memcpy(&n, good_.data(), 8);
    header_ = nlohmann::json::parse(good_.substr(8, n));
    data_ = good_.substr(8 + n);
  }

  // The file of header text `header` and data area `data`, with its length prefix.
  static std::string join(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    return out + header + data;
  }
  std::string with_header(const nlohmann::json& header) const { return join(header.dump(), data_); }

  // A file of the good one's tensors with `edit` applied (serialised afresh, so the layout is
  // valid and only what the run expects is wrong).
  std::string with_tensors(
      const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)>& edit) const {
    const safetensors::View view(good_, "good", safetensors::Source::kCheckpoint);
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& [name, e] : view.entries()) tensors.emplace_back(name, view.copy(name));
    edit(tensors);
    return safetensors::serialize(tensors, view.metadata());
  }

  // Writes `bytes` to <case>.safetensors and loads it as a row without a recorded size or hash,
  // of the good file's epoch and step unless `epoch` and `step` say otherwise.
  void expect_refused(const std::string& name, const std::string& bytes, const std::string& needle,
                      int epoch = 1, int64_t step = 2) {
    SCOPED_TRACE(name);
    const std::string path = d_ + "/" + name + ".safetensors";
    write_bytes(path, bytes);
    std::vector<torch::Tensor> before;
    for (const auto& t : net_.parameters()) before.push_back(t.detach().clone());
    for (const auto& t : net_.buffers()) before.push_back(t.detach().clone());
    const size_t states = opt_.state().size();
    try {
      load_checkpoint(row_of({path, 0, ""}, epoch, step), net_, opt_, {"mine"});
      ADD_FAILURE() << "no error for " << name;
    } catch (const CheckpointError& e) {
      std::string what = e.what();
      const size_t at = what.find(path);
      EXPECT_NE(at, std::string::npos) << what;
      if (at != std::string::npos) what.erase(at, path.size());  // the needle is not the name
      EXPECT_NE(what.find(needle), std::string::npos) << e.what();
    }
    size_t i = 0;
    for (const auto& t : net_.parameters()) EXPECT_TRUE(torch::equal(t, before[i++]));
    for (const auto& t : net_.buffers()) EXPECT_TRUE(torch::equal(t, before[i++]));
    EXPECT_EQ(opt_.state().size(), states);
  }

  std::string d_;
  Net net_;
  torch::optim::SGD opt_{net_.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  std::string good_, data_;
  nlohmann::json header_;
};

TEST_F(CraftedCheckpoint, TheGoodFileLoads) {
  write_bytes(d_ + "/copy.safetensors", good_);
  EXPECT_EQ(
      load_checkpoint(row_of({d_ + "/copy.safetensors", 0, ""}, 1, 2), net_, opt_, {"mine"}).epoch,
      1);
  // The same bytes in memory, as a data-parallel leader sends them.
  EXPECT_EQ(load_checkpoint_bytes(good_, "rank 0's state", net_, opt_, {"mine"}).global_step, 2);
}

// A stop asked for while the header is read (a signal inside a run, core/process.h) ends the load
// with RunStopped(kInterrupted), not a CheckpointError: a resume would take that for damage and
// fall back to an older checkpoint. (The reader, in the data layer, throws its own Stopped; the
// loader turns it into the run's stop.) In a child process: the stop flag stays set.
TEST_F(CraftedCheckpoint, AStopWhileReadingTheHeaderEndsTheRunAsInterrupted) {
  EXPECT_EXIT(
      {
        amptune::request_stop();
        try {
          load_checkpoint_bytes(good_, "stopped", net_, opt_, {"mine"});
        } catch (const RunStopped& e) {
          std::exit(e.outcome == Outcome::kInterrupted ? 0 : 2);
        } catch (...) {
          std::exit(3);
        }
        std::exit(4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(CraftedCheckpoint, BrokenLayoutsAreRefused) {
  expect_refused("cut_short", good_.substr(0, good_.size() - 10), "truncated");
  std::string huge = good_;
  const uint64_t big = uint64_t(1) << 40;
  std::memcpy(huge.data(), &big, 8);
  expect_refused("huge_header_length", huge, "header length 1099511627776 exceeds the limit");
  std::string longer = good_;
  const uint64_t past = good_.size();
  std::memcpy(longer.data(), &past, 8);
  expect_refused("header_past_the_end", longer, "bytes that follow");
  expect_refused("not_json", join("{\"model.fc.weight\": nope", data_), "not valid JSON");
  expect_refused("not_an_object", join("[1, 2, 3]", data_), "not a JSON object");
  expect_refused("deep", join(std::string(1000, '[') + std::string(1000, ']'), data_),
                 "not a JSON object");
  expect_refused("deep_shape",
                 join(R"({"model.fc.weight": {"shape": )" + std::string(1000, '['), data_),
                 "has a shape entry that is not a non-negative integer");
  expect_refused("trailing_bytes", good_ + "1234", "the tensors cover");

  nlohmann::json h = header_;
  h["model.fc.weight"]["data_offsets"] = {data_.size(), data_.size() + 48};
  expect_refused("offsets_beyond", with_header(h), "past the end");
  h = header_;
  h["model.bn.weight"]["data_offsets"] = header_["model.fc.bias"]["data_offsets"];
  expect_refused("two_at_one_offset", with_header(h), "overlap");
  h = header_;
  h["model.fc.weight"]["dtype"] = "F99";
  expect_refused("unknown_dtype", with_header(h), "unknown dtype \"F99\"");
  h = header_;
  h["model.fc.weight"]["shape"] = {3, 5};
  expect_refused("shape_bytes_mismatch", with_header(h), "needs 60 bytes, its offsets span 48");
  h = header_;
  h["model.fc.weight"]["shape"] = {uint64_t(1) << 62, uint64_t(1) << 62};
  expect_refused("element_count_overflow", with_header(h), "more than 2^64");
  h = header_;
  h["model.fc.weight"]["shape"] = {-3, 4};
  expect_refused("negative_shape", with_header(h), "non-negative");
  h = header_;
  h["model.fc.weight"]["data_offsets"] = {48, 0};
  expect_refused("reversed_offsets", with_header(h), "ends before it begins");
  h = header_;
  h["__metadata__"]["epoch"] = 3;
  expect_refused("metadata_not_string", with_header(h), "__metadata__.epoch is not a string");
  // Two entries under one name (nlohmann would keep the last one silently).
  std::string text = header_.dump();
  const std::string other = "\"model.bn.weight\"";
  text.replace(text.find(other), other.size(), "\"model.fc.bias\"");
  expect_refused("repeated_name", join(text, data_), "names \"model.fc.bias\" twice");
}

// The epoch row, not the file, says where training stands: a file whose metadata names another
// epoch or step (another epoch's file copied in its place, a crafted one) is refused, as are
// negative positions even where a crafted row agrees.
TEST_F(CraftedCheckpoint, APositionOtherThanTheRowsIsRefused) {
  expect_refused("other_epoch", good_, "says it ends epoch 1 at step 2, its database row epoch 2",
                 2, 2);
  expect_refused("other_step", good_, "its database row epoch 1 at step 7", 1, 7);
  for (const auto& [epoch, step] : {std::pair<int, int64_t>{-5, 2}, {1, -1}}) {
    nlohmann::json h = header_;
    h["__metadata__"]["epoch"] = std::to_string(epoch);
    h["__metadata__"]["global_step"] = std::to_string(step);
    expect_refused("negative_" + std::to_string(epoch), with_header(h), "says it ends epoch", epoch,
                   step);
  }
}

TEST_F(CraftedCheckpoint, TensorsTheRunDoesNotExpectAreRefused) {
  using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;
  auto find = [](Tensors& t, const std::string& name) -> torch::Tensor& {
    for (auto& [n, v] : t) {
      if (n == name) return v;
    }
    throw std::runtime_error("no " + name);
  };
  expect_refused("missing_tensor", with_tensors([](Tensors& t) {
                   t.erase(std::remove_if(t.begin(), t.end(),
                                          [](const auto& p) { return p.first == "model.fc.bias"; }),
                           t.end());
                 }),
                 "lacks tensor model.fc.bias (saved from another model?)");
  expect_refused("wrong_shape", with_tensors([&](Tensors& t) {
                   find(t, "model.fc.weight") = torch::zeros({3, 5});
                 }),
                 "model.fc.weight is Float [3, 5], this run's is Float [3, 4]");
  expect_refused("wrong_dtype", with_tensors([&](Tensors& t) {
                   find(t, "model.bn.running_mean") = torch::zeros({3}, torch::kDouble);
                 }),
                 "Double [3]");
  expect_refused("wrong_momentum_shape", with_tensors([&](Tensors& t) {
                   find(t, "optim.p0.momentum_buffer") = torch::zeros({4, 3});
                 }),
                 "(another optim.name?)");
  expect_refused("unexpected_tensor", with_tensors([](Tensors& t) {
                   t.emplace_back("model.fc2.weight", torch::zeros({2}));
                 }),
                 "holds tensor model.fc2.weight, which this run does not have");
  expect_refused("rng_missing", with_tensors([](Tensors& t) { t.pop_back(); }), "lacks tensor");

  nlohmann::json h = header_;
  h["__metadata__"]["format"] = "amptune-checkpoint-9";
  expect_refused("newer_format", with_header(h), "format \"amptune-checkpoint-9\"");
  h = header_;
  h["__metadata__"].erase("config_hash");
  expect_refused("no_config_hash", with_header(h), "lacks __metadata__.config_hash");
  h = header_;
  h["__metadata__"]["epoch"] = "3x";
  expect_refused("epoch_not_integer", with_header(h), "not an integer");
  expect_refused("no_metadata", with_header([&] {
                   nlohmann::json j = header_;
                   j.erase("__metadata__");
                   return j;
                 }()),
                 "lacks __metadata__.format");
}

// What earlier releases wrote (a LibTorch archive): the model's own archive, SGD momentum as
// "p<i>.momentum_buffer" with a "count", meta.* and the RNG state.
std::string legacy_bytes(const Net& net, torch::optim::SGD& opt, const std::string& hash) {
  torch::serialize::OutputArchive archive, model, optim;
  net.save(model);
  auto& state = opt.state();
  int64_t count = 0;
  const auto params = opt.param_groups()[0].params();
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = state.find(optimizer_state_key<std::remove_reference_t<decltype(state)>>(params[i]));
    if (it == state.end()) continue;
    optim.write("p" + std::to_string(i) + ".momentum_buffer",
                static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer(), true);
    ++count;
  }
  optim.write("count", c10::IValue(count));
  archive.write("model", model);
  archive.write("optimizer", optim);
  archive.write("meta.format", c10::IValue(std::string("amptune-checkpoint-1")));
  archive.write("meta.epoch", c10::IValue(int64_t{3}));
  archive.write("meta.global_step", c10::IValue(int64_t{9}));
  archive.write("meta.config_hash", c10::IValue(hash));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng.cpu", gen.get_state());
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// Old-format checkpoints load only with AMPTUNE_TRUST_LEGACY_CHECKPOINTS=1; without it the refusal
// says why and what to do, before the archive is parsed at all.
TEST_F(CraftedCheckpoint, OldFormatNeedsTheOptIn) {
  const char* saved = std::getenv(kTrustLegacyEnv);
  ASSERT_EQ(saved, nullptr) << "the test sets " << kTrustLegacyEnv << " itself";
  const std::string legacy = legacy_bytes(net_, opt_, "mine");
  ASSERT_EQ(legacy.substr(0, 2), "PK");
  const std::string path = d_ + "/epoch_0003.pt";
  write_bytes(path, legacy);
  Net other;
  torch::optim::SGD other_opt(other.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  try {
    load_checkpoint(row_of({path, 0, ""}, 3, 9), other, other_opt, {"mine"});
    ADD_FAILURE() << "an old-format checkpoint loaded without the opt-in";
  } catch (const LegacyCheckpointError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "checkpoint " + path +
            " is in the old TorchScript format, which can run code when "
            "loaded; set AMPTUNE_TRUST_LEGACY_CHECKPOINTS=1 if it comes from your own amptune");
  }
  // Not even parsed: a zip signature followed by garbage gets the same answer.
  expect_refused("garbage_zip", std::string("PK\x03\x04", 4) + "not an archive",
                 "AMPTUNE_TRUST_LEGACY_CHECKPOINTS=1");

  ::setenv(kTrustLegacyEnv, "1", 1);
  const auto meta = load_checkpoint(row_of({path, 0, ""}, 3, 9), other, other_opt, {"mine"});
  EXPECT_EQ(meta.epoch, 3);
  EXPECT_EQ(meta.global_step, 9);
  EXPECT_EQ(meta.format, "amptune-checkpoint-1");
  expect_equal_modules(net_, other);
  train_some(net_, opt_, 1);
  train_some(other, other_opt, 1);  // the momentum came along
  expect_equal_modules(net_, other);
  // With the opt-in, LibTorch's own errors on a broken archive are CheckpointErrors too.
  expect_refused("broken_zip", std::string("PK\x03\x04", 4) + "not an archive", "cannot be read");
  ::unsetenv(kTrustLegacyEnv);
}

}  // namespace
}  // namespace amptune::train
