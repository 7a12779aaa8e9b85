// model.name torchscript with the real binary (docs/MODELS.md "Your own model"): torchvision's
// narrow ResNet-18 scripted in Python (tests/fixtures/torchscript/) trains under emulated O1,
// resumes bit for bit, is diagnosed, evaluated and exported by module path; the file's content,
// not its path, is the run's identity; a planted fp16 overflow in it is found and fixed by `tune`;
// it trains as a 2-rank data-parallel job; bad files and keys are refused with their exit codes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "integration/harness.h"
#include "models/weights.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

const std::string kFixtures = std::string(AMPTUNE_FIXTURE_DIR) + "/torchscript/";

std::string model_line(const std::string& path) {
  return "{name: torchscript, path: " + path + ", num_classes: 4, in_channels: 1}";
}

// The tiny sweep of the harness with the scripted network copied into the sweep's folder.
TinySweep scripted_sweep(const std::string& tag, const std::string& tail = "", int epochs = 2,
                         const std::string& base = "") {
  TinyOptions o = quick_tiny(tail, epochs);
  o.dir_tag = tag;
  o.model = model_line("model.pt");
  o.base = base;
  TinySweep f = make_tiny_sweep(o);
  fs::copy_file(kFixtures + "resnet18_tiny_script.pt", f.dir + "/model.pt");
  return f;
}

std::vector<std::string> run_args(const TinySweep& f, const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"run", f.yaml, "--db", f.db, "-q"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(TorchScriptCli, TrainsResumesBitwiseAndIsDiagnosedByModulePath) {
  const TinySweep f = scripted_sweep("train", "", 2, "  amp: {opt_level: O1, backend: emulate}\n");
  Result r = run_amptune(run_args(f), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto epochs = epochs_of(f.db, "1");
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_TRUE(epochs[1].metrics.count("acc1"));
  EXPECT_TRUE(epochs[1].metrics.count("loss_scale"));
  // Its work is counted through the scripted layers as the built-in ResNet-18's is: 366784
  // multiply-accumulates of the same architecture (PerfCli's kTinyTrainingFlops) x 6.
  EXPECT_EQ(store::Store(f.db).find_run("1")->work.train_flops_per_sample, 6.0 * 366784);

  // Continue from epoch 0 as a new run that trains epoch 1 again: the same weights bit for bit.
  r = run_amptune({"fork", "1", "--epoch", "0", "--db", f.db, "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string a = f.dir + "/a.pt", b = f.dir + "/b.pt";
  ASSERT_EQ(run_amptune({"export", "1", "--epoch", "1", "--out", a, "--db", f.db}, f.dir).exit_code, 0);
  ASSERT_EQ(run_amptune({"export", "2", "--epoch", "1", "--out", b, "--db", f.db}, f.dir).exit_code, 0);
  const auto wa = models::read_state_dict(a), wb = models::read_state_dict(b);
  ASSERT_TRUE(wa.count("layer3.1.conv2.weight")) << "the module's own state-dict names";
  for (const auto& [name, t] : wa) EXPECT_TRUE(t.equal(wb.at(name))) << name;

  r = run_amptune({"diagnose", "1", "--epoch", "1", "--db", f.db}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layer1.0.bn"), std::string::npos) << r.out;  // rows by module path

  r = run_amptune({"eval", "1", "--db", f.db}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(TorchScriptCli, TheFilesContentIsTheIdentityNotItsPath) {
  const TinySweep f = scripted_sweep("identity", "", 1);
  ASSERT_EQ(run_amptune(run_args(f), f.dir).exit_code, 0);
  // The same bytes elsewhere: the same run, already done.
  fs::create_directories(f.dir + "/elsewhere");
  fs::copy_file(f.dir + "/model.pt", f.dir + "/elsewhere/net.pt");
  Result r = run_amptune(run_args(f, {"--set", "model.path=elsewhere/net.pt"}), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(store::Store(f.db).runs("tiny").size(), 1u);
  // Another file (the traced network): another run.
  fs::copy_file(kFixtures + "resnet18_tiny_trace.pt", f.dir + "/traced.pt");
  r = run_amptune(run_args(f, {"--set", "model.path=traced.pt"}), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(store::Store(f.db).runs("tiny").size(), 2u);
}

TEST(TorchScriptCli, BadFilesAndKeysAreRefusedWithTheirExitCodes) {
  const TinySweep f = scripted_sweep("bad", "", 1);
  write_file(f.dir + "/weights.pt", "a state dict, say");
  Result r = run_amptune(run_args(f, {"--set", "model.path=weights.pt"}), f.dir);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("weights.pt is not a TorchScript archive"), std::string::npos) << r.err;

  r = run_amptune(run_args(f, {"--set", "model.path=" + kFixtures + "newer_version.pt"}), f.dir);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("saved by a newer PyTorch"), std::string::npos) << r.err;

  r = run_amptune(run_args(f, {"--set", "amp.opt_level=O1", "--set",
                               "amp.fp32_modules=[layer1.0.conv9]"}),
                  f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("amp.fp32_modules: 'layer1.0.conv9' matches no module"), std::string::npos)
      << r.err;

  // Known only once it runs: the run fails with the reason.
  r = run_amptune(run_args(f, {"--set", "model.path=" + kFixtures + "wrong_output_shape.pt"}),
                  f.dir);
  EXPECT_EQ(r.exit_code, 8) << r.err;
  EXPECT_NE(r.err.find("[batch, classes] logits"), std::string::npos) << r.err;

  r = run_amptune(run_args(f, {"--set", "model.path="}), f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("model.path"), std::string::npos) << r.err;
  // Refused while the sweep was planned: no run but the one whose forward failed.
  EXPECT_EQ(store::Store(f.db).runs("tiny").size(), 1u);
}

// Two ranks on c10d (Gloo): the gradients of the mirrored tensors are averaged; BatchNorm runs the
// model's own code, which cannot be synchronised, so dist.sync_bn is refused.
TEST(TorchScriptCli, TrainsAsATwoRankDataParallelJob) {
  const TinySweep f = scripted_sweep("ranks", "", 1);
  Result r = run_amptune(run_args(f, {"--nproc", "2", "--set", "data.batch_size=8"}), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(f.db);
  const auto run = store.find_run("1");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->provenance.world_size, 2);
  const auto epochs = epochs_of(f.db, "1");
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0].metrics.at("train_images"), 64);  // both ranks' images
  EXPECT_TRUE(epochs[0].metrics.count("acc1"));

  r = run_amptune(run_args(f, {"--nproc", "2", "--set", "dist.sync_bn=true"}), f.dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("dist.sync_bn"), std::string::npos) << r.err;
}

// model.task custom: the fixture regressor (its own training_loss, eval_batch and metric
// directions) on its data.format tensors shards trains, resumes bit for bit, and is compared by
// its primary metric, mse (lower is better), in `compare` and `report`.
TEST(TorchScriptCli, ACustomTaskTrainsResumesBitwiseAndIsCompared) {
  const std::string dir = scratch_dir("custom");
  fs::copy(kFixtures + "tensors", dir + "/data", fs::copy_options::recursive);
  fs::copy_file(kFixtures + "regressor_custom.pt", dir + "/regressor.pt");
  write_file(dir + "/sweep.yaml",
             "name: regression\n"
             "base:\n"
             "  model: {name: torchscript, path: regressor.pt, task: custom}\n"
             "  data: {format: tensors, root: data, train_split: train, val_split: val,\n"
             "         batch_size: 32, workers: 1}\n"
             "  optim: {name: sgd, lr: 0.02, momentum: 0.9}\n"
             "  schedule: {epochs: 3}\n"
             "  threads: 1\n"
             "grid:\n"
             "  amp.opt_level: [O0, O2]\n"
             "  amp.backend: [emulate]\n");
  const std::string db = dir + "/results.sqlite";
  Result r = run_amptune({"run", "sweep.yaml", "--db", db, "-q"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Run 2 (O2) continued from its epoch 1 as a new run: epoch 2 again, the same numbers bit for
  // bit (weights, masters, loss scaler, optimizer, RNG restored).
  r = run_amptune({"fork", "2", "--epoch", "1", "--db", db, "-q"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto straight = epochs_of(db, "2"), continued = epochs_of(db, "3");
  ASSERT_EQ(straight.size(), 3u);
  ASSERT_FALSE(continued.empty());
  const auto& a = straight.back();
  const auto& b = continued.back();
  EXPECT_EQ(a.epoch, b.epoch);
  for (const char* m : {"mse", "mae", "loss_scale", "val_samples"}) {
    ASSERT_TRUE(a.metrics.count(m) && b.metrics.count(m)) << m;
    EXPECT_EQ(a.metrics.at(m), b.metrics.at(m)) << m;
  }
  EXPECT_EQ(a.train_loss, b.train_loss);
  EXPECT_EQ(a.metrics.at("val_samples"), 64);
  EXPECT_LT(straight[2].metrics.at("mse"), straight[0].metrics.at("mse")) << "it learns";
  // Every metric amptune recorded beside the module's own is one it names as its own
  // (records::amptune_metric_names: the names a custom module may not take).
  for (const auto& [name, value] : a.metrics) {
    if (name == "mse" || name == "mae") continue;
    const auto& own = records::amptune_metric_names();
    EXPECT_NE(std::find(own.begin(), own.end(), name), own.end()) << name;
  }
  {
    // mse is lower-is-better (the module's higher_is_better): the run's best epoch in the view
    // every reader ranks by (metric_info) is its lowest mse, not its highest.
    store::Store store(db);
    EXPECT_EQ(store.higher_is_better("mse"), false);
    double lowest = straight[0].metrics.at("mse");
    for (const auto& e : straight) lowest = std::min(lowest, e.metrics.at("mse"));
    const auto best = store.query("SELECT best_value FROM run_summary WHERE run_id = 2");
    ASSERT_EQ(best.rows.size(), 1u);
    ASSERT_TRUE(best.rows[0][0]);
    EXPECT_DOUBLE_EQ(std::stod(*best.rows[0][0]), lowest);
  }
  r = run_amptune({"compare", "--sweep", "regression", "--db", db, "--format", "csv"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mse"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("O2"), std::string::npos) << r.out;

  // The report: the page ranks the runs by the module's own primary metric.
  r = run_amptune({"report", "--db", db, "--sweep", "regression", "--out", dir + "/report"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = read_file(dir + "/report/index.html");
  EXPECT_NE(html.find("mse"), std::string::npos) << html;
  EXPECT_TRUE(fs::exists(dir + "/report/metric_vs_epoch.png")) << html;

  // Image data for a custom task is refused when the sweep is planned.
  r = run_amptune({"run", "sweep.yaml", "--db", dir + "/bad.sqlite", "-q", "--set",
                   "data.format=idx"},
                  dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("set data.format: tensors"), std::string::npos) << r.err;

  // A module without eval_batch is refused before anything runs.
  fs::copy_file(kFixtures + "custom_no_eval_batch.pt", dir + "/no_eval.pt");
  r = run_amptune({"run", "sweep.yaml", "--db", dir + "/bad.sqlite", "-q", "--set",
                   "model.path=no_eval.pt"},
                  dir);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("has no method eval_batch"), std::string::npos) << r.err;
}

// The planted problem of tune_test.cpp (tiny images left unnormalised: beyond fp16's 65504 once
// conv1 casts them under O1) in the scripted network: the diagnosis names the scripted conv1 and
// the search keeps it in fp32, within tolerance of O0.
TEST(TorchScriptCli, TuneFindsAndFixesThePlantedOverflowInTheScriptedModel) {
  const std::string tune =
      "tune:\n"
      "  metric: train_loss\n"
      "  tolerance: {abs: 0.1}\n"
      "  reference: {amp.opt_level: O0}\n"
      "  start: {amp.opt_level: O1, amp.loss_scale: 128}\n";
  TinySweep f = scripted_sweep("tune", tune, 3, "  amp: {loss_scale: dynamic, max_loss_scale: 1024}\n");
  const Result r = run_amptune({"tune", f.yaml, "--db", f.db, "--no-progress", "--set",
                                "data.mean=[-1.0]", "--set", "data.std=[0.000016]"},
                               f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  amp.fp32_modules: [conv1]\n"), std::string::npos) << r.out;
  store::Store store(f.db);
  const auto searches = store.tune_searches("tiny");
  ASSERT_EQ(searches.size(), 1u);
  EXPECT_EQ(records::to_string(searches[0].status), "answered") << searches[0].note;
  const auto candidates = store.tune_candidates(searches[0].id);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0].advice_rule, records::AdviceRule::kActivationOverflow);
  EXPECT_EQ(candidates[0].advice_module, "conv1");
}

// issue 46 item 12: a scripted classifier whose first convolution takes one channel, with
// model.in_channels left at its default 3, failed in its first step with LibTorch's message
// ("expected input[16, 3, 12, 12] to have 1 channels", exit 8); planning now refuses it, naming
// the key and the value to set, before any run exists.
TEST(TorchScriptCli, AClassifiersChannelsAreCheckedAgainstModelInChannelsWhilePlanning) {
  const TinySweep f = scripted_sweep("channels", "", 1);
  for (const bool dry : {true, false}) {
    std::vector<std::string> args = run_args(f, {"--set", "model.in_channels=3"});
    if (dry) args.push_back("--dry-run");
    const Result r = run_amptune(args, f.dir);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("model.in_channels is 3 but the first layer of model.path "),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("model.pt, 'conv1' (Conv2d, weight [4, 1, 3, 3]), takes 1 input "
                         "channel; set model.in_channels: 1"),
              std::string::npos)
        << r.err;
  }
  EXPECT_TRUE(store::Store(f.db).runs("tiny").empty());
  const Result ok = run_amptune(run_args(f, {"--dry-run"}), f.dir);  // in_channels: 1
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// The run `run` of `db` once its status is `status`, waiting at most `seconds`.
std::optional<records::RunRow> run_when(const std::string& db, const std::string& run,
                                      records::RunStatus status, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    try {
      if (fs::exists(db)) {
        auto row = store::Store(db).find_run(run);
        if (row && row->status == status) return row;
      }
    } catch (const std::exception&) {  // the database is being created
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

// issue 46 item 9: a scripted forward that never returns (never_returns_in_training.pt loops in
// train mode) held the process through SIGINT, SIGTERM and a second SIGINT, and the run stayed
// `running`. The first signal still only asks the loop to stop after the step (which never
// ends); the second ends the process at once with exit code 130, the run put back to pending.
TEST(TorchScriptCli, ASecondSignalEndsAStepThatNeverReturnsAndReleasesTheRun) {
  for (const int second : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(second);
    const TinySweep f = scripted_sweep(second == SIGINT ? "forever-int" : "forever-term", "", 1);
    fs::copy_file(kFixtures + "never_returns_in_training.pt", f.dir + "/model.pt",
                  fs::copy_options::overwrite_existing);
    const pid_t pid = spawn_amptune(run_args(f), f.dir);
    StopOnExit stop(pid);
    ASSERT_TRUE(run_when(f.db, "1", records::RunStatus::kRunning, 120))
        << read_file(f.dir + "/child.err");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // into the first step
    ASSERT_EQ(::kill(pid, SIGINT), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    ASSERT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << "the first signal waits for the step";
    const auto sent = std::chrono::steady_clock::now();
    ASSERT_EQ(::kill(pid, second), 0);
    EXPECT_EQ(wait_exit_code(pid, 10), 130) << read_file(f.dir + "/child.err");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    EXPECT_LT(took, 3.0) << "s from the second signal to the exit";
    const auto run = store::Store(f.db).find_run("1");
    ASSERT_TRUE(run);
    EXPECT_EQ(run->status, records::RunStatus::kPending) << run->message;
    EXPECT_NE(run->message.find("second signal"), std::string::npos) << run->message;
    EXPECT_NE(read_file(f.dir + "/child.err").find("interrupted again"), std::string::npos)
        << read_file(f.dir + "/child.err");
  }
}

// issue 46 item 14: a model with a bool buffer (a transformer's causal mask) failed --nproc 2 on
// Gloo with "(gloo): Invalid scalar type", reported as "rank 0 lost contact with rank 1"; the
// buffer now goes through the broadcast as its bytes, and the run trains on both ranks.
TEST(TorchScriptCli, AModelWithABoolBufferTrainsAsATwoRankJob) {
  const TinySweep f = scripted_sweep("boolmask", "", 1);
  fs::copy_file(kFixtures + "causal_mask_classifier.pt", f.dir + "/model.pt",
                fs::copy_options::overwrite_existing);
  const Result r = run_amptune(run_args(f, {"--nproc", "2", "--set", "data.batch_size=8"}), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("lost contact"), std::string::npos) << r.err;
  const auto run = store::Store(f.db).find_run("1");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, records::RunStatus::kDone) << run->message;
  EXPECT_EQ(run->provenance.world_size, 2);
  const auto epochs = epochs_of(f.db, "1");
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0].metrics.at("train_images"), 64);
}

}  // namespace
}  // namespace amptune::testing

namespace amptune::testing {
namespace {

// A custom module whose higher_is_better names a metric amptune cannot record (an epochs column,
// one of amptune's own, not an identifier) is refused when the sweep is planned, --dry-run
// included, exit 7 naming the metric: before, each cell trained a whole epoch and failed on
// recording (exit 8), or val_samples / train_images were silently overwritten. The modules are
// made here with Debian's PyTorch (tools/install-deps.sh installs python3-torch).
TEST(TorchScriptCli, CustomMetricNamesAreCheckedWhenTheSweepIsPlanned) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with torch missing (tools/install-deps.sh installs it)";
  }
  const std::string dir = scratch_dir("metric_names");
  fs::copy(kFixtures + "tensors", dir + "/data", fs::copy_options::recursive);
  const std::vector<std::string> names = {"train_loss", "epoch", "", "Bad'Name", "val_samples",
                                          "train_images"};
  std::string script =
      "import sys, torch\nfrom typing import Dict\n"
      "class M(torch.nn.Module):\n"
      "    higher_is_better: Dict[str, bool]\n"
      "    def __init__(self, name: str):\n"
      "        super().__init__()\n"
      "        self.head = torch.nn.Linear(8, 1)\n"
      "        self.higher_is_better = {name: False}\n"
      "    def forward(self, x):\n"
      "        return self.head(x)\n"
      "    @torch.jit.export\n"
      "    def training_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:\n"
      "        return ((self.forward(batch['x']) - batch['y']) ** 2).mean()\n"
      "    @torch.jit.export\n"
      "    def eval_batch(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:\n"
      "        e = self.forward(batch['x']) - batch['y']\n"
      "        out: Dict[str, torch.Tensor] = {}\n"
      "        for k in self.higher_is_better:\n"
      "            out[k] = (e * e).sum()\n"
      "        return out\n"
      "for i, name in enumerate(sys.argv[1:]):\n"
      "    torch.jit.save(torch.jit.script(M(name)), 'm%d.pt' % i)\n";
  write_file(dir + "/make.py", script);
  std::string command = "cd '" + dir + "' && /usr/bin/python3 make.py";
  for (const std::string& name : names) command += " \"" + name + "\"";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  write_file(dir + "/sweep.yaml",
             "name: names\n"
             "base:\n"
             "  model: {name: torchscript, path: m0.pt, task: custom}\n"
             "  data: {format: tensors, root: data, train_split: train, val_split: val,\n"
             "         batch_size: 32, workers: 1}\n"
             "  schedule: {epochs: 1}\n");
  for (size_t i = 0; i < names.size(); ++i) {
    for (const std::vector<std::string>& mode :
         {std::vector<std::string>{"--dry-run"}, std::vector<std::string>{"-q"}}) {
      std::vector<std::string> args = {"run", "sweep.yaml", "--db", dir + "/r.sqlite", "--set",
                                       "model.path=m" + std::to_string(i) + ".pt"};
      args.insert(args.end(), mode.begin(), mode.end());
      const Result r = run_amptune(args, dir);
      EXPECT_EQ(r.exit_code, 7) << names[i] << ": " << r.err;
      EXPECT_NE(r.err.find("names the metric '" + names[i] + "', which a custom model cannot "
                           "record"),
                std::string::npos)
          << names[i] << ": " << r.err;
      if (mode[0] == "--dry-run") {  // it says that checking the file runs its code
        EXPECT_NE(r.err.find("model.path m" + std::to_string(i) +
                             ".pt: loading it to check it; a TorchScript file is code"),
                  std::string::npos)
            << r.err;
      }
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/r.sqlite")) << "nothing is written for a refused sweep";
}

}  // namespace
}  // namespace amptune::testing
