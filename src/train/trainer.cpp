// The training loop of one run: build model / data / optimizer from the run's config, continue
// from the newest valid checkpoint, train and evaluate every epoch, record each epoch in the store
// together with its checkpoint, apply retention, and write the end-of-run summary.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/cluster.h"
#include "dist/group.h"
#include "dist/reducer.h"
#include "models/batchnorm.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/precision.h"
#include "train/profile.h"
#include "train/retention.h"
#include "train/runner.h"
#include "train/schedule.h"
#include "train/session.h"
#include "train/optimizer.h"
#include "train/task.h"

namespace amptune::train {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Whether this process has reached a first training step already: its first run's start-up is the
// process's age (loading LibTorch, planning), a later run's only what that run spent before its
// first step.
std::atomic<bool> g_stepped{false};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string hms(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

// Keeps a claimed run's heartbeat fresh from its own thread and database connection, whatever
// the training thread is doing (a long evaluation, a checkpoint write, data loading), and
// notices when another process has taken the run over.
class HeartbeatThread {
 public:
  HeartbeatThread(const std::string& db, int64_t run_id, double period_seconds)
      : store_(db), run_id_(run_id), period_(std::max(0.05, period_seconds)),
        thread_([this] { loop(); }) {}
  ~HeartbeatThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

  // Throws the ClaimLostError the thread met: another process holds the run now.
  void check() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!lost_.empty()) throw store::ClaimLostError(lost_);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
      lock.unlock();
      std::string lost;
      try {
        store_.heartbeat(run_id_);
      } catch (const store::ClaimLostError& e) {
        lost = e.what();
      } catch (const std::exception& e) {  // a busy or full disk: the next beat tries again
        log::warn(std::string("heartbeat: ") + e.what());
      }
      lock.lock();
      if (!lost.empty()) {
        lost_ = lost;
        return;
      }
    }
  }

  store::Store store_;  // its own connection: a Store is used from one thread
  const int64_t run_id_;
  const std::chrono::duration<double> period_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string lost_;
  std::thread thread_;  // last: starts once the members above exist
};

// Progress of the training steps of one epoch, on stderr.
class Progress {
 public:
  Progress(bool enabled, bool tty, int64_t every, int64_t epoch, int64_t epochs, int64_t steps)
      : enabled_(enabled), tty_(tty), every_(every), epoch_(epoch), epochs_(epochs), steps_(steps) {}
  void step(int64_t step, double loss, double fps, double elapsed) {
    if (!enabled_) return;
    const bool last = step + 1 == steps_;
    if (!tty_ && (step + 1) % every_ != 0 && !last) return;
    if (tty_ && !last && seconds_since(last_draw_) < 0.2) return;
    last_draw_ = Clock::now();
    const double eta = step + 1 < steps_ ? elapsed / static_cast<double>(step + 1) *
                                               static_cast<double>(steps_ - step - 1)
                                         : 0.0;
    std::fprintf(stderr, "%sepoch %lld/%lld step %lld/%lld loss %.4f %.1f img/s ETA %s%s",
                 tty_ ? "\r\033[K" : "", static_cast<long long>(epoch_ + 1),
                 static_cast<long long>(epochs_), static_cast<long long>(step + 1),
                 static_cast<long long>(steps_), loss, fps, hms(eta).c_str(),
                 tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool enabled_, tty_;
  int64_t every_, epoch_, epochs_, steps_;
  Clock::time_point last_draw_{};
};

// " acc1 61.2 acc5 90.1 val_loss 1.03": the evaluation metrics a log line shows, those present.
std::string metric_text(const std::map<std::string, double>& metrics) {
  std::string text;
  for (const char* m : {"acc1", "acc5", "val_loss", "mrpe", "ap_root_25"}) {
    auto it = metrics.find(m);
    if (it != metrics.end()) text += std::string(" ") + m + " " + std::to_string(it->second);
  }
  return text;
}

// Restores torch's default CPU generator when the scope ends: an evaluation between steps then
// leaves the random numbers training draws as they would have been without it (evaluation
// draws none today; the loader seeds its own generators per sample).
class KeepCpuRng {
 public:
  KeepCpuRng() {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    state_ = gen.get_state();
  }
  ~KeepCpuRng() {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state_);
  }
  KeepCpuRng(const KeepCpuRng&) = delete;
  KeepCpuRng& operator=(const KeepCpuRng&) = delete;

 private:
  torch::Tensor state_;
};

// Deletes the files of forgotten epochs that lie in the run's own folder (remove_own_checkpoint).
void delete_files(const std::vector<store::CheckpointFile>& files, const std::string& run_dir) {
  for (auto& f : files) remove_own_checkpoint(f.path, run_dir);
}

// Where training starts: the epoch loaded (-1: from scratch), the optimizer steps done,
// whether the loss scaler starts fresh (its initial scale is recorded), and whether the weights
// are the run's initial ones (from scratch or a fork's start, not a resumed checkpoint of its
// own: schedule.eval_initial evaluates them).
struct Start {
  int64_t epoch = -1;
  int64_t global_step = 0;
  bool fresh_scaler = true;
  bool initial = true;
};

// A fork's start (docs/DATABASE.md "Forks"): the parent's checkpoint of parent_epoch is loaded
// into a session built from the PARENT's config (so the file verifies and O2 masters load), then
// its full-precision weights (fp32 masters where the parent had them) and buffers seed a session
// of the fork's config. Unless reset_optimizer, the optimizer state carries over, and the loss
// scaler's state when both runs scale dynamically; the RNG continues from the parent's.
Start start_from_parent(store::Store& store, const store::RunRow& run, const Config& config,
                        const torch::Device& device, Session& session) {
  const store::ForkOrigin& fork = *run.fork;
  auto parent = store.find_run(fork.parent_run_id);
  if (!parent) throw CheckpointError("fork " + run.name + ": its parent run " +
                                     std::to_string(fork.parent_run_id) + " is gone");
  std::optional<store::EpochRow> row;
  for (auto& r : store.epochs(parent->id)) {
    if (r.epoch == fork.parent_epoch) row = r;
  }
  if (!row || !row->checkpoint) {
    throw CheckpointError("fork " + run.name + " starts from the checkpoint of epoch " +
                          std::to_string(fork.parent_epoch) + " of run " + parent->name +
                          ", which " + (row ? "was deleted (retention)" : "is not recorded yet") +
                          "; train the parent that far (amptune resume " + parent->name + ")");
  }
  const Config parent_config = Config::from_json(parent->config_json, "run " + parent->name);
  std::map<std::string, torch::Tensor> values;
  torch::Tensor rng;
  std::optional<amp::ScalerState> scaler;
  std::unique_ptr<torch::optim::Optimizer> parent_optimizer;
  {
    Precision parent_precision(parent_config, device);  // this thread's amp policy until the end
    Session ps = build_session(parent_config, device, parent_precision);
    load_checkpoint(*row->checkpoint, ps.task->module(), *ps.optimizer, owner_hashes(*parent),
                    &parent_precision.engine());
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    values = full_precision_state(ps.task->module(), parent_precision.engine());
    if (!fork.reset_optimizer && parent_precision.policy().dynamic_scale) {
      scaler = parent_precision.engine().scaler().state();
    }
    if (!fork.reset_optimizer) parent_optimizer = std::move(ps.optimizer);
  }
  const std::string origin = "checkpoint " + row->checkpoint->path + " of run " + parent->name;
  session = build_session(config, device, *session.precision, &values, origin);
  Start start;
  start.epoch = fork.parent_epoch;
  start.global_step = row->global_step;
  if (parent_optimizer) copy_optimizer_state(*parent_optimizer, *session.optimizer);
  if (scaler && session.precision->policy().dynamic_scale) {
    session.precision->engine().scaler().load_state(*scaler);
    start.fresh_scaler = false;
  }  // otherwise a fresh scaler: its initial scale is recorded at the fork's first step
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  log::info("fork " + run.name + ": starting after epoch " + std::to_string(start.epoch) +
            " of " + parent->name + (fork.reset_optimizer ? " (weights only)" : "") +
            (fork.changes.empty() ? "" : "; changed " + fork.changes));
  return start;
}

// Loads the newest valid checkpoint (at most `from_epoch`) into `session`; returns the epoch
// loaded, or -1 when training starts from scratch. Later epochs are dropped from the store. Any
// CheckpointError (missing, corrupt, malformed, mismatched) falls back to the previous
// checkpoint, except LegacyCheckpointError (an old-format file without the opt-in), which stops
// with nothing deleted.
// A fork without a checkpoint of its own starts from its parent's.
Start restore(store::Store& store, const store::RunRow& run, const Config& config,
              const torch::Device& device, const RunOptions& options, Session& session) {
  std::vector<store::EpochRow> rows = store.epochs(run.id);
  const std::string run_dir = checkpoint_dir(config, store, run.id);
  auto from_scratch = [&]() {
    if (run.fork) return start_from_parent(store, run, config, device, session);
    return Start{};
  };
  // An evaluation-only run saved no checkpoint: running it again evaluates again.
  if (options.fresh || rows.empty() || config.get_int("schedule.epochs") == 0) {
    if (!rows.empty()) delete_files(store.truncate_after(run.id, -1), run_dir);
    return from_scratch();
  }
  if (options.from_epoch) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const auto& r) { return r.epoch == *options.from_epoch; });
    if (it == rows.end() || !it->checkpoint) {
      std::string have;
      for (auto& r : rows) {
        if (r.checkpoint) have += (have.empty() ? "" : ", ") + std::to_string(r.epoch);
      }
      throw CheckpointError("run " + run.name + " has no checkpoint of epoch " +
                            std::to_string(*options.from_epoch) + " (saved epochs: " +
                            (have.empty() ? "none" : have) + ")");
    }
  }
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    if (!it->checkpoint) continue;
    if (options.from_epoch && it->epoch > *options.from_epoch) continue;
    try {
      auto meta = load_checkpoint(*it->checkpoint, session.task->module(), *session.optimizer,
                                  owner_hashes(run), &session.precision->engine());
      session.task->place(device);
      delete_files(store.truncate_after(run.id, it->epoch), run_dir);
      log::info("run " + run.name + ": continuing after epoch " + std::to_string(meta.epoch) +
                " (" + it->checkpoint->path + ")");
      return Start{meta.epoch, meta.global_step, false, false};
    } catch (const LegacyCheckpointError&) {
      throw;  // not damage: the user's decision (checkpoint.h), nothing is deleted
    } catch (const CheckpointError& e) {
      if (options.from_epoch) throw;
      log::warn(std::string(e.what()) + "; falling back to the previous checkpoint");
      session = build_session(config, device, *session.precision);  // undo a half-done load
    }
  }
  log::warn("run " + run.name + ": no valid checkpoint left, starting again from " +
            (run.fork ? "its parent's checkpoint" : "epoch 0"));
  delete_files(store.truncate_after(run.id, -1), run_dir);
  return from_scratch();
}

std::string summary_json(store::Store& store, const store::RunRow& run, const Config& config,
                         const torch::Device& device, const dist::Cluster* cluster) {
  auto rows = store.epochs(run.id);
  nlohmann::ordered_json j;
  double fps_sum = 0, fps_min = 0, fps_max = 0, seconds = 0;
  int fps_n = 0;
  for (auto& r : rows) {
    seconds += r.epoch_seconds;
    if (r.train_fps_mean > 0) {
      fps_sum += r.train_fps_mean;
      fps_min = fps_n == 0 ? r.train_fps_min : std::min(fps_min, r.train_fps_min);
      fps_max = std::max(fps_max, r.train_fps_max);
      ++fps_n;
    }
  }
  auto last_metric = [&](const std::string& name) -> nlohmann::json {
    if (rows.empty()) return nullptr;
    auto it = rows.back().metrics.find(name);
    return it == rows.back().metrics.end() ? nlohmann::json(nullptr) : nlohmann::json(it->second);
  };
  j["run"] = run.name;
  j["model"] = config.get_string("model.name");
  const int world = cluster ? cluster->size() : 1;
  j["local_rank"] = cluster ? cluster->env().local_rank : 0;
  j["world_size"] = world;
  j["batch_size"] = config.get_int("data.batch_size");  // per process, as the seed's JSON
  j["global_batch"] = config.get_int("data.batch_size") * world;
  j["epochs"] = config.get_int("schedule.epochs");
  j["training_step_per_epoch"] = config.get_int("schedule.training_step_per_epoch");
  j["eval_step_per_epoch"] = config.get_int("schedule.eval_step_per_epoch");
  j["acc1"] = last_metric("acc1");
  j["acc5"] = last_metric("acc5");
  j["device"] = device.str();
  j["skip_steps"] = config.get_int("schedule.skip_steps");
  j["train_fps_mean"] = fps_n ? fps_sum / fps_n : 0.0;
  j["train_fps_min"] = fps_min;
  j["train_fps_max"] = fps_max;
  j["training_time"] = hms(seconds);
  return j.dump();
}

}  // namespace

void request_stop() { amptune::request_stop(); }
bool stop_requested() { return amptune::stop_requested(); }

std::map<std::string, std::string> run_columns(const Config& config) {
  auto info = model_info(config);
  const std::string device = config.get_string("device");
  const amp::Policy policy = amp::resolve_policy(
      config, device == "cuda" || (device == "auto" && torch::cuda::is_available()));
  return {
      {"model", config.at("model.name").dump()},
      {"dataset", nlohmann::json(config.get_string("data.format") + ":" +
                                 config.get_string("data.root"))
                      .dump()},
      {"optimizer", config.at("optim.name").dump()},
      {"lr", config.at("optim.lr").dump()},
      {"batch_size", config.at("data.batch_size").dump()},
      {"epochs", config.at("schedule.epochs").dump()},
      {"lr_dec_epoch", config.at("schedule.lr_dec_epoch").dump()},
      {"seed", config.at("seed").dump()},
      {"primary_metric", nlohmann::json(info.primary_metric).dump()},
      // amp: the resolved policy (loss_scale auto -> the level's default; the backend this
      // machine uses). Throws ConfigError for a combination apex refuses, before anything runs.
      {"opt_level", nlohmann::json(amp::to_string(policy.opt_level)).dump()},
      {"dtype", nlohmann::json(amp::to_string(policy.dtype)).dump()},
      {"loss_scale", policy.dynamic_scale ? nlohmann::json("dynamic").dump()
                                          : nlohmann::json(policy.static_scale).dump()},
      {"backend", nlohmann::json(amp::to_string(policy.backend)).dump()},
      {"backend_reason", nlohmann::json(policy.backend_reason).dump()},
  };
}

int resolve_threads(const Config& config, int override_threads) {
  int threads = override_threads > 0 ? override_threads : static_cast<int>(config.get_int("threads"));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads;
}

std::string resolve_device(const Config& config) { return pick_device(config).str(); }

std::string default_checkpoint_root(const std::string& db_path) {
  const fs::path db(db_path);
  return (db.parent_path() / "checkpoints" / db.stem()).string();
}

std::string checkpoint_dir(const Config& config, const store::Store& store, int64_t run_id) {
  std::string dir = config.get_string("checkpoint.dir");
  if (dir.empty()) dir = default_checkpoint_root(store.path());
  return (fs::path(dir) / std::to_string(run_id)).string();
}

namespace {

// AMPTUNE_FAULT_OVERFLOW=RANK:STEP (tests, docs/DISTRIBUTED.md): rank RANK finds an inf
// gradient at optimizer step STEP (1-based global step) after the gradients were averaged, so
// only that rank sees the overflow unless the ranks agree on it.
std::optional<std::pair<int, int64_t>> injected_overflow() {
  const char* v = std::getenv("AMPTUNE_FAULT_OVERFLOW");
  if (!v || !*v) return std::nullopt;
  int rank = 0;
  long long step = 0;
  if (std::sscanf(v, "%d:%lld", &rank, &step) != 2) {
    throw ConfigError(std::string("AMPTUNE_FAULT_OVERFLOW must be RANK:STEP, got '") + v + "'");
  }
  return std::make_pair(rank, static_cast<int64_t>(step));
}

std::string run_message(const store::RunRow& run) {
  nlohmann::json j;
  j["type"] = "run";
  j["id"] = run.id;
  j["name"] = run.name;
  j["sweep"] = run.sweep_name;
  j["label"] = run.label;
  j["config_json"] = run.config_json;
  j["config_hash"] = run.config_hash;
  return j.dump();
}

// What every rank of a data-parallel step agrees on, summed over the ranks.
struct StepVote {
  double loss_sum = 0;  // loss x samples of ranks whose loss was finite
  double samples = 0;
  double non_finite = 0, overflow = 0, stop = 0, lost = 0;
};

// A run this process stops without finishing: back to pending with `message` (when `store` is
// set), so the next command that takes it continues it; a store error is logged, not thrown.
RunResult stopped_run(store::Store* store, int64_t run_id, Outcome outcome,
                      const std::string& message) {
  if (store) {
    try {
      store->release_run(run_id, message);
    } catch (const std::exception& e) {
      log::warn(std::string("could not release run: ") + e.what());
    }
  }
  return RunResult{outcome, message, ""};
}

// The training of one run by this process: the whole run when alone (`store` set), the
// leader's part (`store` set, options.cluster set) or a follower's (`store` null).
RunResult train_impl(store::Store* store, const store::RunRow& run, const RunOptions& options) {
  const auto began = Clock::now();  // this run's start-up starts here (after the process's)
  const GracefulStop graceful;      // a signal stops the run at the next step (process.h)
  RunResult result;
  dist::Cluster* cluster = options.cluster;
  const bool leader = store != nullptr;
  std::unique_ptr<dist::ProcessGroup> group;
  try {
    std::unique_ptr<HeartbeatThread> heartbeat;
    if (store) heartbeat = std::make_unique<HeartbeatThread>(store->path(), run.id, options.heartbeat_seconds);
    if (cluster && leader) cluster->publish(run_message(run));
    const Config config = Config::from_json(run.config_json, "run " + run.name);
    const int threads = resolve_threads(config, options.threads);
    torch::set_num_threads(threads);
    const torch::Device device = pick_device(config);
    const auto info = model_info(config);
    if (cluster) {
      group = std::make_unique<dist::ProcessGroup>(
          *cluster, cluster->next_group_name(), config.get_string("dist.backend"),
          config.get_double("dist.timeout_s"), device);
    }
    const int world = group ? group->size() : 1;
    const int rank = group ? group->rank() : 0;

    Precision precision(config, device);  // amp.*: policy, loss scaler, masters
    Session session;
    Start start;
    std::shared_ptr<data::Dataset> train_set, val_set;
    const int64_t eval_steps = config.get_int("schedule.eval_step_per_epoch");
    const int64_t batch_size = config.get_int("data.batch_size");
    const int64_t epochs = config.get_int("schedule.epochs");
    const bool eval_only = epochs == 0;  // evaluates the initial weights, trains nothing
    std::string ckpt_dir;
    std::string setup_error;
    try {
      session = build_session(config, device, precision);
      if (store) {
        claim_checkpoint_root(config, *store);  // before anything is written or deleted there
        start = restore(*store, run, config, device, options, session);
      }
      if (!eval_only) {
        train_set = data::make_dataset(config, data::Split::kTrain);
        check_world_size(*train_set, batch_size, world);
      }
      if (eval_steps != 0) val_set = data::make_dataset(config, data::Split::kVal);
      if (store) {
        ckpt_dir = checkpoint_dir(config, *store, run.id);
        // Saves of this run that a killed process left half-written (it holds the run now).
        for (const auto& file : remove_dead_temp_files(ckpt_dir)) {
          log::info("run " + run.name + ": removed " + file + " (a save interrupted by a crash)");
        }
      }
    } catch (const std::exception& e) {
      if (!group) throw;
      setup_error = e.what();
    }
    if (group) {
      // Every rank reaches this point, failed or not, so one rank's error stops all of them.
      const auto errors = group->allgather_bytes(setup_error);
      for (int r = 0; r < world; ++r) {
        if (errors[static_cast<size_t>(r)].empty()) continue;
        throw std::runtime_error(r == rank ? errors[static_cast<size_t>(r)]
                                           : "rank " + std::to_string(r) + " could not start: " +
                                                 errors[static_cast<size_t>(r)]);
      }
      // The leader's state (fresh weights, or the checkpoint it continues from) on every rank.
      std::string header, state;
      if (leader) {
        header = nlohmann::json({{"epoch", start.epoch},
                                 {"global_step", start.global_step},
                                 {"fresh_scaler", start.fresh_scaler},
                                 {"initial", start.initial}})
                     .dump();
        state = checkpoint_bytes(session.task->module(), *session.optimizer,
                                 CheckpointMeta{start.epoch, start.global_step, run.config_hash},
                                 &precision.engine());
      }
      group->broadcast_bytes(header);
      group->broadcast_bytes(state);
      if (!leader) {
        const auto h = nlohmann::json::parse(header);
        start = Start{h.at("epoch").get<int64_t>(), h.at("global_step").get<int64_t>(),
                      h.at("fresh_scaler").get<bool>(), h.at("initial").get<bool>()};
        load_checkpoint_bytes(state, "the state rank 0 sent", session.task->module(),
                              *session.optimizer, owner_hashes(run), &precision.engine());
        session.task->place(device);
      }
    }
    const int64_t last_done = start.epoch;
    const Schedule schedule = Schedule::from_config(config);
    const int64_t skip_steps = config.get_int("schedule.skip_steps");
    const int64_t every = config.get_int("checkpoint.every");

    std::unique_ptr<dist::GradReducer> reducer;
    std::unique_ptr<models::ScopedBatchNormSync> sync_bn;
    if (group) {
      dist::ReducerOptions ro;
      ro.bucket_mb = config.get_double("dist.bucket_mb");
      ro.overlap = config.get_bool("dist.overlap");
      ro.one_buffer = config.get_bool("amp.combine_grad");
      reducer = std::make_unique<dist::GradReducer>(*group, session.task->module().parameters(),
                                                    ro);
      if (config.get_bool("dist.sync_bn")) {
        dist::ProcessGroup* g = group.get();
        sync_bn = std::make_unique<models::ScopedBatchNormSync>([g](const torch::Tensor& t) {
          torch::Tensor sum = t.detach().clone();
          g->allreduce(sum);
          return sum;
        });
      }
    }
    const auto fault = injected_overflow();
    const std::vector<torch::Tensor> buffers = session.task->module().buffers();

    data::LoaderOptions train_opts = data::loader_options(config, data::Split::kTrain, 0);
    train_opts.max_batches = config.get_int("schedule.training_step_per_epoch");
    train_opts.rank = rank;
    train_opts.world = world;
    data::LoaderOptions val_opts = data::loader_options(config, data::Split::kVal, 0);
    val_opts.max_batches = eval_steps;
    val_opts.rank = rank;
    val_opts.world = world;
    val_opts.shard = data::LoaderOptions::Shard::kBatches;

    // The evaluation split under the run's precision, in eval mode (BatchNorm normalises with its
    // running statistics and leaves them as they are); with several processes each evaluates its
    // shard of the batches and the records combine into the single-process result.
    auto evaluate = [&](int64_t epoch) {
      val_opts.epoch = static_cast<uint64_t>(epoch);
      data::Loader val_loader(val_set, val_opts);
      session.task->module().eval();
      auto autocast = precision.autocast();
      std::vector<EvalBatch> batches = session.task->evaluate_batches(val_loader, device);
      if (group) {  // every rank's batches, in the single-process order
        const auto parts = group->allgather_bytes(encode_eval_batches(batches));
        batches.clear();
        for (const auto& part : parts) {
          for (auto& b : decode_eval_batches(part)) batches.push_back(std::move(b));
        }
        std::sort(batches.begin(), batches.end(),
                  [](const EvalBatch& x, const EvalBatch& y) { return x.index < y.index; });
      }
      return session.task->metrics(batches);
    };

    int64_t global_step = start.global_step;
    if (leader) {
      const auto& described = eval_only ? val_set : train_set;
      log::info("run " + run.name + " [" + run.label + "]: " + described->describe() + ", " +
                std::to_string(threads) + " threads, " + device.str() +
                (group ? ", " + std::to_string(world) + " processes (" + group->backend() +
                             "), global batch " + std::to_string(batch_size * world)
                       : ""));
    }

    if (leader && precision.policy().slow_backend) {
      log::warn("run " + run.name + ": " + precision.policy().backend_reason +
                "; amp.backend auto would pick the faster path");
    }
    StepProfiler profiler(leader ? profile_steps(config) : std::nullopt, ckpt_dir);
    bool first_epoch_here = true;  // this process's first epoch: its start-up time is recorded

    // A data-parallel run's way out: every rank returns the same outcome.
    auto stop_all = [&](Outcome outcome, const std::string& message) {
      result.outcome = outcome;
      result.message = message;
      if (store && outcome == Outcome::kInterrupted) store->release_run(run.id, message);
      if (store && outcome == Outcome::kDiverged) {
        store->finish_run(run.id, store::RunStatus::kDiverged, message, "");
        log::warn("run " + run.name + " diverged: " + message);
      }
      return result;
    };

    // The initial weights (seeded init, model.weights, or a fork's start) evaluated before any
    // training step: an evaluation-only run (schedule.epochs: 0) records them as its one epoch,
    // epoch 0 with global_step 0, no training values and no checkpoint; schedule.eval_initial
    // records them in initial_metrics. Not on resume: the run keeps what its start recorded.
    if (val_set && start.initial && (eval_only || config.get_bool("schedule.eval_initial"))) {
      const auto eval_start = Clock::now();
      std::map<std::string, double> metrics;
      {
        KeepCpuRng keep;
        metrics = evaluate(last_done + 1);
      }
      if (store) {
        if (eval_only) {
          const double nan = std::numeric_limits<double>::quiet_NaN();
          store::EpochRecord record;
          record.run_id = run.id;
          record.epoch = 0;
          record.global_step = 0;
          record.lr = record.train_loss = nan;
          record.train_fps_mean = record.train_fps_min = record.train_fps_max = nan;
          record.epoch_seconds = seconds_since(eval_start);
          record.metrics = metrics;
          record.initial_metrics = metrics;
          store->record_epoch(record);
        } else {
          store->record_initial_metrics(run.id, metrics);
        }
        log::info("run " + run.name + ": initial weights" + metric_text(metrics) + ", " +
                  hms(seconds_since(eval_start)) +
                  (eval_only ? " (evaluation only: epoch 0, nothing trained)" : ""));
      }
    }

    for (int64_t epoch = last_done + 1; epoch < epochs; ++epoch) {
      const auto epoch_start = Clock::now();
      train_opts.epoch = static_cast<uint64_t>(epoch);
      data::Loader loader(train_set, train_opts);
      const int64_t steps = loader.num_batches();
      session.task->module().train();
      Progress progress(options.progress && leader, options.progress_tty,
                        config.get_int("log.every_steps"), epoch, epochs, steps);
      double loss_sum = 0, fps_sum = 0, fps_min = 0, fps_max = 0, lr = 0;
      double comm_seconds = 0, step_seconds = 0;
      int64_t step = 0, fps_n = 0, skipped = 0, images = 0, finite_losses = 0;
      precision.begin_epoch(/*fresh=*/epoch == last_done + 1 && start.fresh_scaler, global_step);
      store::EpochTimes times;  // where the epoch's time goes (store.h)
      std::string trace;
      auto step_start = Clock::now();
      auto phase_start = step_start;
      // Adds the time since the last phase ended to `phase`.
      auto lap = [&phase_start](double& phase) {
        const auto now = Clock::now();
        phase += std::chrono::duration<double>(now - phase_start).count();
        phase_start = now;
      };
      while (auto batch = loader.next()) {
        lap(times.data_wait);
        if (first_epoch_here) {
          times.startup = g_stepped.exchange(true)
                              ? std::chrono::duration<double>(Clock::now() - began).count()
                              : process_age_seconds();
          first_epoch_here = false;
        }
        profiler.begin_step(global_step);
        if (amptune::stop_requested() && !group) {
          return stop_all(Outcome::kInterrupted, "interrupted in epoch " + std::to_string(epoch));
        }
        skipped += batch->skipped;
        const int64_t n = batch->images.defined() ? batch->images.size(0) : 0;
        if (n == 0 && !group) {
          phase_start = Clock::now();
          continue;
        }
        lr = schedule.lr_at(epoch, step, steps);
        set_lr(*session.optimizer, lr);
        precision.zero_grad();  // model and master gradients
        lap(times.optimizer);
        double loss_value = 0;
        if (!group) {
          torch::Tensor loss;
          {
            auto autocast = precision.autocast();  // native O1 only
            loss = session.task->train_loss(*batch, device);
          }
          loss_value = loss.item<double>();
          lap(times.forward);
          const std::string diverged =
              std::isfinite(loss_value) ? "" : precision.non_finite_loss(loss_value);
          if (!diverged.empty()) {
            return stop_all(Outcome::kDiverged, diverged + " at epoch " + std::to_string(epoch) +
                                                    " step " + std::to_string(step));
          }
          // amp: loss x scale -> backward -> unscale/check -> step or skip -> masters -> scale.
          const bool overflow = precision.backward(loss);
          lap(times.backward);
          precision.step(overflow, *session.optimizer, global_step + 1);
          lap(times.optimizer);
        } else {
          // Data-parallel: gradients averaged over the ranks between backward and the amp
          // check; then the ranks agree on overflow (any rank's skips the step everywhere),
          // a non-finite loss, a stop request and a lost claim.
          reducer->prepare();
          dist::broadcast_buffers(*group, buffers);  // rank 0's BatchNorm statistics, as DDP
          auto average = [&] {
            comm_seconds += reducer->finish();
            if (fault && fault->first == rank && fault->second == global_step + 1) {
              auto params = session.task->module().parameters();
              torch::NoGradGuard no_grad;
              if (!params.empty() && params[0].grad().defined()) {
                params[0].mutable_grad().fill_(std::numeric_limits<float>::infinity());
              }
            }
          };
          bool overflow = false;
          if (n > 0) {
            torch::Tensor loss;
            {
              auto autocast = precision.autocast();
              loss = session.task->train_loss(*batch, device);
            }
            loss_value = loss.item<double>();
            lap(times.forward);
            overflow = precision.backward(loss, average);
            lap(times.backward);
          } else {  // every sample of this rank's batch was corrupt: it still takes part
            average();
            overflow = precision.engine().unscale_and_check();
          }
          StepVote vote;
          if (n > 0 && std::isfinite(loss_value)) {
            vote.loss_sum = loss_value * static_cast<double>(n);
            vote.samples = static_cast<double>(n);
          }
          vote.non_finite = n > 0 && !std::isfinite(loss_value);
          vote.overflow = overflow;
          vote.stop = amptune::stop_requested();
          std::string lost_message;
          if (heartbeat) {
            try {
              heartbeat->check();
            } catch (const store::ClaimLostError& e) {
              vote.lost = 1;
              lost_message = e.what();
            }
          }
          const auto vote_start = Clock::now();
          torch::Tensor votes = torch::tensor({vote.loss_sum, vote.samples, vote.non_finite,
                                               vote.overflow, vote.stop, vote.lost},
                                              torch::kDouble);
          group->allreduce(votes);
          comm_seconds += seconds_since(vote_start);
          auto v = votes.accessor<double, 1>();
          if (v[5] > 0) {
            return stop_all(Outcome::kLost, lost_message.empty()
                                                ? "rank 0 lost its claim on run " + run.name
                                                : lost_message);
          }
          if (v[4] > 0) {
            return stop_all(Outcome::kInterrupted, "interrupted in epoch " + std::to_string(epoch));
          }
          if (v[2] > 0) {
            const double nan = std::numeric_limits<double>::quiet_NaN();
            const std::string diverged = precision.non_finite_loss(nan);
            if (!diverged.empty()) {
              return stop_all(Outcome::kDiverged, diverged + " at epoch " +
                                                      std::to_string(epoch) + " step " +
                                                      std::to_string(step));
            }
            loss_value = nan;
          } else {
            loss_value = v[1] > 0 ? v[0] / v[1] : 0.0;  // the mean over every rank's samples
          }
          precision.step(v[3] > 0, *session.optimizer, global_step + 1);
          lap(times.optimizer);
        }
        if (auto path = profiler.end_step(global_step); !path.empty()) trace = path;
        ++global_step;
        if (std::isfinite(loss_value)) {
          loss_sum += loss_value;
          ++finite_losses;
        }
        images += n;
        const double dt = seconds_since(step_start);
        step_start = Clock::now();
        step_seconds += dt;
        const double fps = dt > 0 ? static_cast<double>(n) / dt : 0;
        if (step >= skip_steps) {
          fps_sum += fps;
          fps_min = fps_n == 0 ? fps : std::min(fps_min, fps);
          fps_max = std::max(fps_max, fps);
          ++fps_n;
        }
        progress.step(step, loss_value, fps * world, seconds_since(epoch_start));
        ++step;
        if (heartbeat && !group) heartbeat->check();  // taken over by another process: stop
        phase_start = Clock::now();  // the next batch's wait starts now
      }
      if (auto path = profiler.finish(); !path.empty()) trace = path;
      if (step == 0) {
        throw DataError("epoch " + std::to_string(epoch) + " of run " + run.name +
                        " produced no training batch: " + train_set->describe() +
                        " holds fewer samples than data.batch_size=" + std::to_string(batch_size) +
                        (world > 1 ? " x " + std::to_string(world) + " processes" : ""));
      }

      store::EpochRecord record;
      record.run_id = run.id;
      record.epoch = static_cast<int>(epoch);
      record.global_step = global_step;
      record.lr = lr;
      record.train_loss = finite_losses ? loss_sum / static_cast<double>(finite_losses)
                                        : std::numeric_limits<double>::quiet_NaN();
      record.train_fps_mean = fps_n ? fps_sum / static_cast<double>(fps_n) : 0;
      record.train_fps_min = fps_min;
      record.train_fps_max = fps_max;
      record.skipped_samples = skipped;
      if (group) {
        // Global figures: img/s summed over the ranks; each rank's mean, slowest and fastest.
        torch::Tensor sums = torch::tensor({record.train_fps_mean, fps_min, fps_max, comm_seconds,
                                            step_seconds, static_cast<double>(images),
                                            static_cast<double>(skipped)},
                                           torch::kDouble);
        torch::Tensor low = torch::tensor({record.train_fps_mean}, torch::kDouble);
        torch::Tensor high = low.clone();
        group->allreduce(sums);
        group->allreduce(low, dist::ProcessGroup::Op::kMin);
        group->allreduce(high, dist::ProcessGroup::Op::kMax);
        auto a = sums.accessor<double, 1>();
        record.train_fps_mean = a[0];
        record.train_fps_min = a[1];
        record.train_fps_max = a[2];
        record.skipped_samples = static_cast<int64_t>(a[6]);
        images = static_cast<int64_t>(a[5]);
        record.metrics["rank_fps_min"] = low.item<double>();
        record.metrics["rank_fps_max"] = high.item<double>();
        record.metrics["allreduce_ms"] = 1000.0 * a[3] / static_cast<double>(world * step);
        record.metrics["allreduce_share"] = a[4] > 0 ? a[3] / a[4] : 0.0;
        record.metrics["world_size"] = static_cast<double>(world);
      }
      // Every rank evaluates and rank 0 saves the model with rank 0's statistics.
      if (group) dist::broadcast_buffers(*group, buffers);
      const auto eval_start = Clock::now();
      if (val_set) {
        for (auto& [name, value] : evaluate(epoch)) record.metrics[name] = value;
      }
      times.eval = seconds_since(eval_start);
      precision.end_epoch(record);  // loss_scale*, overflow/skipped steps, scale events
      record.metrics["train_images"] = static_cast<double>(images);
      record.epoch_seconds = seconds_since(epoch_start);
      record.profile_trace = trace;
      if (store) {
        // Still ours? (Another process writes the same file names once it holds the run.)
        store->heartbeat(run.id);
        if ((epoch + 1) % every == 0 || epoch + 1 == epochs) {
          char name[48];
          std::snprintf(name, sizeof name, "epoch_%04lld.safetensors",
                        static_cast<long long>(epoch));
          CheckpointMeta meta{epoch, global_step, run.config_hash};
          const auto save_start = Clock::now();
          record.checkpoint = save_checkpoint((fs::path(ckpt_dir) / name).string(),
                                              session.task->module(), *session.optimizer, meta,
                                              &precision.engine());
          times.checkpoint = seconds_since(save_start);
        }
        record.times = times;
        const auto db_start = Clock::now();
        store->record_epoch(record);  // advances the heartbeat in the same transaction
        apply_retention(*store, run.id, config, info.primary_metric, info.higher_is_better);
        store->set_epoch_db_seconds(run.id, record.epoch, seconds_since(db_start));

        std::string line = "run " + run.name + " epoch " + std::to_string(epoch) + ": train_loss " +
                           std::to_string(record.train_loss) + metric_text(record.metrics);
        line += " " + std::to_string(static_cast<int64_t>(record.train_fps_mean)) + " img/s, " +
                hms(record.epoch_seconds);
        if (record.skipped_samples) {
          line += ", " + std::to_string(record.skipped_samples) + " corrupt samples skipped";
        }
        log::info(line);
      }
      if (options.stop_after_epoch && epoch >= *options.stop_after_epoch && epoch + 1 < epochs) {
        return stop_all(Outcome::kInterrupted,
                        "stopped after epoch " + std::to_string(epoch) + " as asked");
      }
    }
    if (store) {
      result.summary_json = summary_json(*store, run, config, device, cluster);
      store->finish_run(run.id, store::RunStatus::kDone, "", result.summary_json);
    }
    result.outcome = Outcome::kDone;
    return result;
  } catch (const store::ClaimLostError& e) {
    // Another process took the run over (this one was presumed dead): it owns the run's rows
    // and files now, so nothing more is written here.
    result.outcome = Outcome::kLost;
    result.message = e.what();
    return result;
  } catch (const RankLostError& e) {
    // A rank is gone: the run goes back to pending, resumable from its last checkpoint.
    return stopped_run(store, run.id, Outcome::kRankLost, e.what());  // (logged by the caller)
  } catch (const LegacyCheckpointError& e) {
    // An old-format checkpoint without the opt-in: the run fails this time but stays pending
    // with its checkpoints, so the same command with the opt-in continues it.
    return stopped_run(store, run.id, Outcome::kFailed, e.what());
  } catch (const std::exception& e) {
    result.outcome = Outcome::kFailed;
    result.message = e.what();
    if (!store) {
      log::warn("run " + run.name + " failed on rank " +
                std::to_string(cluster ? cluster->rank() : 0) + ": " + result.message);
      return result;
    }
    try {
      store->finish_run(run.id, store::RunStatus::kFailed, result.message, "");
    } catch (const std::exception& e2) {
      log::warn(std::string("could not mark run failed: ") + e2.what());
    }
    return result;
  }
}

}  // namespace

RunResult train_run(store::Store& store, const store::RunRow& run, const RunOptions& options) {
  return train_impl(&store, run, options);
}

RunResult follow_run(const store::RunRow& run, const RunOptions& options) {
  RunOptions o = options;
  o.progress = false;
  return train_impl(nullptr, run, o);
}

std::optional<store::RunRow> next_run(dist::Cluster& cluster, int* leader_exit) {
  const auto j = nlohmann::json::parse(cluster.receive());
  if (j.at("type") == "end") {
    if (leader_exit) *leader_exit = j.value("exit", 0);
    return std::nullopt;
  }
  store::RunRow run;
  run.id = j.at("id").get<int64_t>();
  run.name = j.at("name").get<std::string>();
  run.sweep_name = j.at("sweep").get<std::string>();
  run.label = j.at("label").get<std::string>();
  run.config_json = j.at("config_json").get<std::string>();
  run.config_hash = j.at("config_hash").get<std::string>();
  return run;
}

void end_runs(dist::Cluster& cluster, int exit_code) {
  cluster.publish(nlohmann::json({{"type", "end"}, {"exit", exit_code}}).dump());
  // This process serves the store the others read the message from: stay until they have it
  // (briefly when a rank is known lost: it will never read it).
  const double wait = exit_code == static_cast<int>(ExitCode::kEnvironment) ? 5 : 60;
  if (!cluster.await_receipt(wait)) {
    log::warn("not every rank acknowledged the end of the job within " +
              std::to_string(static_cast<int>(wait)) + " s");
  }
}

}  // namespace amptune::train
