// `amptune export`'s export_checkpoint: the written state dict holds the checkpoint's weights at
// full precision under torchvision's names (O2: the fp32 masters, not the fp16-grid copies the
// model computes with), BatchNorm buffers included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "app/run/run_input.h"
#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"
#include "models/weights.h"
#include "store/store.h"
#include "support/scratch.h"
#include "support/tiny_config.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/session.h"

namespace amptune::train {
namespace {
namespace fs = std::filesystem;

class TrainExport : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::scratch_dir(); }

  static Config tiny(const std::string& opt_level) {
    Config c = testing::tiny_config();
    c.set("amp.opt_level", opt_level);
    c.set("optim.lr", 0.5);
    return c;
  }

  // Trains a few steps as the trainer does, saves the checkpoint of epoch 0 and records it.
  // Returns the run and the module's state and masters at save time (copies).
  struct Saved {
    records::RunRow run;
    std::map<std::string, torch::Tensor> model;    // parameters and buffers as the model has them
    std::map<std::string, torch::Tensor> masters;  // parameter name -> fp32 master (O2)
  };
  Saved train_and_save(store::Store& store, const Config& config) {
    records::RunSpec spec;
    spec.label = "export";
    spec.config_json = config.canonical_json();
    spec.config_hash = config.hash();
    Saved saved;
    saved.run = store.ensure_run(store.ensure_sweep("s", "", "", ""), spec);
    const torch::Device cpu(torch::kCPU);
    const Settings settings = Settings::from(config);
    Precision precision(amp::resolve_policy(settings.amp, cpu.is_cuda()));
    Session s = build_session(settings, cpu, precision);
    s.task->module().train();
    torch::manual_seed(11);
    for (int step = 0; step < 3; ++step) {
      data::Batch batch;
      batch.images = torch::randn({8, 1, 12, 12});
      batch.fields["label"] = torch::randint(0, 4, {8}, torch::kLong);
      precision.zero_grad();
      auto loss = s.task->train_loss(batch, cpu);
      precision.step(precision.backward(loss), *s.optimizer, step + 1);
    }
    for (auto& p : s.task->module().named_parameters(true)) {
      saved.model[p.key()] = p.value().detach().clone();
    }
    for (auto& b : s.task->module().named_buffers(true)) {
      saved.model[b.key()] = b.value().detach().clone();
    }
    size_t i = 0;
    for (auto& p : s.task->module().named_parameters(true)) {
      const auto& m = precision.engine().masters();
      if (i < m.size() && m[i].defined()) saved.masters[p.key()] = m[i].detach().clone();
      ++i;
    }
    records::EpochRecord r;
    r.run_id = saved.run.id;
    r.epoch = 0;
    r.global_step = 3;
    r.checkpoint = save_checkpoint((dir_ / "epoch_0000.pt").string(), s.task->module(),
                                   *s.optimizer, CheckpointMeta{0, 3, saved.run.config_hash},
                                   &precision.engine());
    store.record_epoch(r);
    return saved;
  }

  // What `amptune export` does (app/artifacts/checkpoint_commands.h): the epoch must have a kept
  // checkpoint among the run's rows (checkpoint_epochs names the saved ones otherwise), then its
  // row is exported.
  static ExportResult export_epoch(const store::Store& store, const records::RunRow& run, int epoch,
                                   const std::string& out) {
    EvalOptions select;
    select.epoch = epoch;
    const auto rows = store.epochs(run.id);
    const RunInput input = app::resolve_run(run);
    checkpoint_epochs(input, rows, select);
    const auto row = std::find_if(rows.begin(), rows.end(),
                                  [&](const records::EpochRow& r) { return r.epoch == epoch; });
    return export_checkpoint(input, *row, out);
  }

  fs::path dir_;
};

TEST_F(TrainExport, O2ExportsTheFp32MastersAndBuffers) {
  store::Store store((dir_ / "amptune.sqlite").string());
  const Saved saved = train_and_save(store, tiny("O2"));
  ASSERT_FALSE(saved.masters.empty()) << "O2 should keep fp32 masters";
  const std::string out = (dir_ / "out" / "weights.pt").string();
  fs::create_directories(dir_ / "out");
  auto result = export_epoch(store, saved.run, 0, out);
  EXPECT_EQ(result.path, out);
  EXPECT_EQ(result.bytes, static_cast<int64_t>(fs::file_size(out)));
  const auto exported = models::read_state_dict(out);
  EXPECT_EQ(static_cast<int64_t>(exported.size()), result.tensors);
  ASSERT_EQ(exported.size(), saved.model.size());
  int differs_from_grid = 0;
  for (auto& [name, value] : saved.model) {
    ASSERT_TRUE(exported.count(name)) << name;
    const torch::Tensor& got = exported.at(name);
    auto master = saved.masters.find(name);
    const torch::Tensor& want = master != saved.masters.end() ? master->second : value;
    EXPECT_EQ(got.scalar_type(), value.is_floating_point() ? torch::kFloat : value.scalar_type())
        << name;
    EXPECT_TRUE(torch::equal(got, want.to(got.scalar_type()))) << name;
    if (master != saved.masters.end() && !torch::equal(master->second, value)) ++differs_from_grid;
  }
  // The masters hold bits the fp16-grid model weights do not: the export took the masters.
  EXPECT_GT(differs_from_grid, 0);
  EXPECT_EQ(exported.at("bn1.num_batches_tracked").scalar_type(), torch::kLong);
  EXPECT_EQ(exported.at("bn1.num_batches_tracked").item<int64_t>(), 3);
  // No temp file left next to the output.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "out"), fs::directory_iterator{}), 1);
}

TEST_F(TrainExport, O0ExportsTheModelAndMissingEpochsAreNamed) {
  store::Store store((dir_ / "amptune.sqlite").string());
  const Saved saved = train_and_save(store, tiny("O0"));
  EXPECT_TRUE(saved.masters.empty());
  const std::string out = (dir_ / "w.pt").string();
  export_epoch(store, saved.run, 0, out);
  const auto exported = models::read_state_dict(out);
  for (auto& [name, value] : saved.model) {
    ASSERT_TRUE(exported.count(name)) << name;
    EXPECT_TRUE(torch::equal(exported.at(name), value)) << name;
  }
  try {
    export_epoch(store, saved.run, 7, (dir_ / "x.pt").string());
    FAIL() << "no CheckpointError for epoch 7";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("saved epochs: 0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "x.pt"));
  // A corrupt checkpoint is a CheckpointError naming the file and the epoch.
  {
    std::fstream f(dir_ / "epoch_0000.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  try {
    export_epoch(store, saved.run, 0, (dir_ / "y.pt").string());
    FAIL() << "no CheckpointError for a corrupt file";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("epoch_0000.pt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("epoch 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amptune::train
