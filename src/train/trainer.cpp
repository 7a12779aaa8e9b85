// The training loop of one run as phases (train/phases.h), and the entry points of
// train/trainer.h: the process that owns the run records through its recorder (the app's
// StoreRecorder), the other ranks of a data-parallel job through a FollowerRecorder.
#include "train/trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "amp/policy.h"
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
#include "train/checkpoint.h"
#include "train/diagnose.h"
#include "train/model_info.h"
#include "train/optimizer.h"
#include "train/peak.h"
#include "train/phases.h"
#include "train/plan.h"
#include "train/precision.h"
#include "train/profile.h"
#include "train/schedule.h"
#include "train/session.h"
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

// Adds the time since `since` to `phase` and moves `since` to now.
void lap(double& phase, Clock::time_point& since) {
  const auto now = Clock::now();
  phase += std::chrono::duration<double>(now - since).count();
  since = now;
}

std::string hms(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

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

// " acc1 61.2 acc5 90.1 val_loss 1.03": the model's headline metrics (model_info.h) and
// val_loss, those present.
std::string metric_text(const std::map<std::string, double>& metrics,
                        const std::vector<std::string>& headline) {
  std::string text;
  auto add = [&](const std::string& m) {
    auto it = metrics.find(m);
    if (it != metrics.end()) text += " " + m + " " + std::to_string(it->second);
  };
  for (const std::string& m : headline) add(m);
  add("val_loss");
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

// The leader's message that `run` is next: its identity and configuration (canonical JSON);
// next_run reads it back. The other ranks restore nothing themselves (the leader hands them its
// restored state), so a fork's origin stays with the leader.
std::string run_message(const RunInput& run) {
  nlohmann::json j;
  j["type"] = "run";
  j["id"] = run.id;
  j["name"] = run.name;
  j["sweep"] = run.sweep_name;
  j["label"] = run.label;
  j["config_json"] = run.config().canonical_json();
  j["config_hash"] = run.config_hash;
  return j.dump();
}

// What every rank of a data-parallel step agrees on: each rank fills its own, and one all-reduce
// (sum) of the wire form gives every rank the same totals. The flags are 0 or 1 per rank, so a
// total above 0 means "some rank".
//   wire: one kDouble tensor of 6 elements, in this order:
//     [0] loss_sum    loss x samples of this rank, when its loss was finite
//     [1] samples     the samples behind loss_sum
//     [2] non_finite  this rank's loss was NaN / inf
//     [3] overflow    this rank's unscaled gradients held an inf / NaN (apex: skip the step)
//     [4] stop        this rank was asked to stop (a signal, a prune decision)
//     [5] lost        this rank's recorder lost its claim on the run
struct StepVote {
  double loss_sum = 0;
  double samples = 0;
  double non_finite = 0, overflow = 0, stop = 0, lost = 0;
  // The rank's FP8 slot count and its square: summed, every rank sees whether all counts are
  // equal (world * sum(c^2) == sum(c)^2 only then) and all decide alike.
  double fp8_slots = 0, fp8_slots_sq = 0;

  static constexpr int64_t kWireSize = 8;
  torch::Tensor to_wire() const {
    return torch::tensor(
        {loss_sum, samples, non_finite, overflow, stop, lost, fp8_slots, fp8_slots_sq},
        torch::kDouble);
  }
  static StepVote from_wire(const torch::Tensor& wire) {
    TORCH_CHECK(wire.numel() == kWireSize && wire.scalar_type() == torch::kDouble,
                "a step vote is ", kWireSize, " doubles");
    const auto v = wire.accessor<double, 1>();
    return StepVote{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  }
  // This rank's vote: the step's loss over its `n` samples, whether its gradients overflowed,
  // the stop it was asked for (`lost`: its claim on the run), its FP8 slot count.
  static StepVote of(double loss, int64_t n, bool overflow, bool stop, bool lost,
                     size_t fp8_slots) {
    StepVote v;
    if (n > 0 && std::isfinite(loss)) {
      v.loss_sum = loss * static_cast<double>(n);
      v.samples = static_cast<double>(n);
    }
    v.non_finite = n > 0 && !std::isfinite(loss);
    v.overflow = overflow;
    v.stop = stop;
    v.lost = lost;
    v.fp8_slots = static_cast<double>(fp8_slots);
    v.fp8_slots_sq = v.fp8_slots * v.fp8_slots;
    return v;
  }
  bool fp8_slots_differ(int world) const {
    return static_cast<double>(world) * fp8_slots_sq != fp8_slots * fp8_slots;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Phases

RunTraining::RunTraining(Recorder& recorder, const RunInput& run, const RunOptions& options)
    : recorder_(recorder),
      run_(run),
      options_(options),
      began_(Clock::now()),
      settings_(run_.settings()) {}

RunTraining::~RunTraining() = default;

void RunTraining::set_up() {
  const Settings& s = settings_;
  threads_ = resolve_threads(s, options_.threads);
  torch::set_num_threads(threads_);
  device_ = pick_device(s.device);
  if (options_.cluster) {
    group_ =
        std::make_unique<dist::ProcessGroup>(*options_.cluster, options_.cluster->next_group_name(),
                                             s.dist.backend, s.dist.timeout_s, device_);
    world_ = group_->size();
    rank_ = group_->rank();
  }
  eval_steps_ = s.schedule.eval_step_per_epoch;
  batch_size_ = s.data.batch_size;
  epochs_ = s.schedule.epochs;
  eval_only_ = epochs_ == 0;  // evaluates the initial weights, trains nothing
  skip_steps_ = s.schedule.skip_steps;
  checkpoint_every_ = s.checkpoint.every;
  schedule_ = Schedule::from(s);
  fault_ = injected_overflow();
  shown_metrics_ = headline_metrics(s.model.name);
  try {
    // amp.*: the policy (resolved once for the run), scaler, masters
    precision_ = std::make_unique<Precision>(amp::resolve_policy(s.amp, device_.is_cuda()));
    session_ = build_session(s, device_, *precision_);
    if (!eval_only_) {
      train_set_ = data::make_dataset(s.data, s.rootnet, s.model, data::Split::kTrain);
      check_world_size(*train_set_, batch_size_, world_);
    }
    if (eval_steps_ != 0) {
      val_set_ = data::make_dataset(s.data, s.rootnet, s.model, data::Split::kVal);
    }
  } catch (const std::exception& e) {
    if (!group_) throw;
    setup_error_ = e.what();  // shared with the other ranks once restore has run
  }

  train_opts_ = data::loader_options(s.data, s.seed, data::Split::kTrain, 0);
  train_opts_.max_batches = s.schedule.training_step_per_epoch;
  train_opts_.rank = rank_;
  train_opts_.world = world_;
  val_opts_ = data::loader_options(s.data, s.seed, data::Split::kVal, 0);
  val_opts_.max_batches = eval_steps_;
  val_opts_.rank = rank_;
  val_opts_.world = world_;
  val_opts_.shard = data::LoaderOptions::Shard::kBatches;
  if (!eval_only_ && rank_ == 0 && setup_error_.empty()) record_work();
}

void RunTraining::place_batches(data::LoaderOptions& options) const {
  options.device = device_;
  options.memory_format = session_.task->memory_format();
}

void RunTraining::record_work() {
  // MFU is a measurement beside the run: a model whose work cannot be counted still trains.
  try {
    const KeepCpuRng keep;  // counting builds a seeded model of its own
    const ForwardWork work = forward_work(settings_, train_set_);
    work_.train_flops_per_sample = training_flops(work);
    work_.uncounted_ops.clear();
    for (const std::string& op : work.uncounted) {
      work_.uncounted_ops += (work_.uncounted_ops.empty() ? "" : ", ") + op;
    }
    if (!work_.uncounted_ops.empty()) {
      recorder_.note("run " + run_.name + ": the training FLOPs leave out the products of " +
                         work_.uncounted_ops + " (fused kernels): the MFU is a lower bound",
                     true);
    }
  } catch (const std::exception& e) {
    recorder_.note("run " + run_.name + ": the training FLOPs were not counted (" +
                       log::clipped(e.what(), 300) + "): no MFU",
                   true);
  }
  const amp::Policy& policy = precision_->policy();
  PeakRequest request;
  request.cuda = device_.is_cuda();
  request.device_index = device_.has_index() ? device_.index() : 0;
  request.threads = threads_;
  request.world = world_;
  // What the arithmetic runs in: the low precision when native, fp32 when emulated (which
  // computes in fp32 and rounds) or O0.
  request.precision = policy.low_precision() && policy.backend == amp::Backend::kNative
                          ? to_string(policy.dtype)
                          : "fp32";
  request.given = options_.peak_flops;
  request.given_by = options_.peak_flops_by;
  const Peak peak = run_peak(request);
  work_.peak_flops = peak.flops;
  work_.peak_precision = peak.precision;
  work_.peak_source = peak.source;
  recorder_.record_work(work_);
}

void RunTraining::restore() {
  if (setup_error_.empty()) {
    try {
      start_ = restore_run(recorder_, run_, device_, options_, session_);
    } catch (const std::exception& e) {
      if (!group_) throw;
      setup_error_ = e.what();
    }
  }
  if (group_) share_start();
  global_step_ = start_.global_step;
  precision_->continue_streak(start_.nonfinite_streak);
  prepare_steps();
}

void RunTraining::prepare_steps() {
  if (group_) {
    dist::ReducerOptions ro;
    ro.bucket_mb = settings_.dist.bucket_mb;
    ro.overlap = settings_.dist.overlap;
    ro.one_buffer = settings_.amp.combine_grad;
    reducer_ = std::make_unique<dist::GradReducer>(*group_, session_.task->module().parameters(),
                                                   ro);
    if (settings_.dist.sync_bn) {
      dist::ProcessGroup* g = group_.get();
      sync_bn_ = std::make_unique<models::ScopedBatchNormSync>([g](const torch::Tensor& t) {
        torch::Tensor sum = t.detach().clone();
        g->allreduce(sum);
        return sum;
      });
    }
  }
  buffers_ = session_.task->module().buffers();

  const auto& described = eval_only_ ? val_set_ : train_set_;
  recorder_.note(
      "run " + run_.name + " [" + run_.label + "]: " + described->describe() + ", " +
          std::to_string(threads_) + " threads, " + device_.str() + ", " +
          session_.task->memory_format_reason() +
          (device_.is_cuda() ? std::string(", cuDNN benchmark ") +
                                   (at::globalContext().benchmarkCuDNN() ? "on" : "off")
                             : "") +
          (group_ ? ", " + std::to_string(world_) + " processes (" + to_string(group_->backend()) +
                        "), global batch " + std::to_string(batch_size_ * world_)
                  : "") +
          (precision_->policy().fp8.enabled ? ", " + precision_->policy().fp8.summary() : ""),
      /*warning=*/false);
  if (precision_->policy().slow_backend) {
    recorder_.note("run " + run_.name + ": " + precision_->policy().backend_reason +
                       "; amp.backend auto would pick the faster path",
                   /*warning=*/true);
  }
  const std::string dir = recorder_.checkpoint_dir();
  profiler_ = std::make_unique<StepProfiler>(
      dir.empty() ? std::nullopt : profile_steps(settings_.profile), dir);
}

void RunTraining::share_start() {
  // Every rank reaches this point, failed or not, so one rank's error stops all of them.
  const auto errors = group_->allgather_bytes(setup_error_);
  for (int r = 0; r < world_; ++r) {
    const std::string& error = errors[static_cast<size_t>(r)];
    if (error.empty()) continue;
    throw std::runtime_error(
        r == rank_ ? error : "rank " + std::to_string(r) + " could not start: " + error);
  }
  // The leader's state (fresh weights, or the checkpoint it continues from) on every rank.
  const bool leader = rank_ == 0;
  std::string header, state;
  if (leader) {
    header = nlohmann::json({{"epoch", start_.epoch},
                             {"global_step", start_.global_step},
                             {"fresh_scaler", start_.fresh_scaler},
                             {"initial", start_.initial},
                             {"nonfinite_streak", start_.nonfinite_streak}})
                 .dump();
    state = checkpoint_bytes(session_.task->module(), *session_.optimizer,
                             CheckpointMeta{start_.epoch, start_.global_step, run_.config_hash},
                             &precision_->engine());
  }
  group_->broadcast_bytes(header);
  group_->broadcast_bytes(state);
  if (!leader) {
    const auto h = nlohmann::json::parse(header);
    start_ = Start{h.at("epoch").get<int64_t>(), h.at("global_step").get<int64_t>(),
                   h.at("fresh_scaler").get<bool>(), h.at("initial").get<bool>(),
                   h.at("nonfinite_streak").get<int64_t>()};
    load_checkpoint_bytes(state, "the state rank 0 sent", session_.task->module(),
                          *session_.optimizer, owner_hashes(run_), &precision_->engine());
    session_.task->place(device_);
  }
}

// The evaluation split under the run's precision, in eval mode (BatchNorm normalises with its
// running statistics and leaves them as they are); with several processes each evaluates its
// shard of the batches and the records combine into the single-process result.
std::map<std::string, double> RunTraining::evaluate(int64_t epoch) {
  val_opts_.epoch = static_cast<uint64_t>(epoch);
  place_batches(val_opts_);
  data::Loader val_loader(val_set_, val_opts_);
  session_.task->module().eval();
  auto autocast = precision_->autocast();
  const auto fp8 = precision_->evaluation();  // FP8 scales in force, no amax recorded
  std::vector<EvalBatch> batches = session_.task->evaluate_batches(val_loader, device_);
  if (group_) {  // every rank's batches, in the single-process order
    const auto parts = group_->allgather_bytes(encode_eval_batches(batches));
    batches.clear();
    for (const auto& part : parts) {
      for (auto& b : decode_eval_batches(part)) batches.push_back(std::move(b));
    }
    std::sort(batches.begin(), batches.end(),
              [](const EvalBatch& x, const EvalBatch& y) { return x.index < y.index; });
  }
  return session_.task->metrics(batches);
}

// The initial weights (seeded init, model.weights, or a fork's start) evaluated before any
// training step: an evaluation-only run (schedule.epochs: 0) records them as its one epoch,
// epoch 0 with global_step 0, no training values and no checkpoint; schedule.eval_initial
// records them in initial_metrics. Not on resume: the run keeps what its start recorded.
void RunTraining::evaluate_initial() {
  if (!val_set_ || !start_.initial || !(eval_only_ || settings_.schedule.eval_initial)) {
    return;
  }
  const auto eval_start = Clock::now();
  std::map<std::string, double> metrics;
  {
    KeepCpuRng keep;
    metrics = evaluate(first_epoch());
  }
  if (eval_only_) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    records::EpochRecord record;
    record.run_id = run_.id;
    record.epoch = 0;
    record.global_step = 0;
    record.lr = record.train_loss = nan;
    record.train_fps_mean = record.train_fps_min = record.train_fps_max = nan;
    record.epoch_seconds = seconds_since(eval_start);
    record.metrics = metrics;
    record.initial_metrics = metrics;
    recorder_.record_epoch(record);
  } else {
    recorder_.record_initial_metrics(metrics);
  }
  recorder_.note("run " + run_.name + ": initial weights" + metric_text(metrics, shown_metrics_) +
                     ", " + hms(seconds_since(eval_start)) +
                     (eval_only_ ? " (evaluation only: epoch 0, nothing trained)" : ""),
                 /*warning=*/false);
}

void RunTraining::stop_if_asked(int64_t epoch) {
  if (auto request = recorder_.stop_request()) {
    throw RunStopped(request->outcome, request->message.empty()
                                           ? "interrupted in epoch " + std::to_string(epoch)
                                           : request->message);
  }
}

double RunTraining::local_step(const data::Batch& batch, int64_t epoch, int64_t step_index,
                               records::EpochTimes& times, Clock::time_point& phase_start) {
  torch::Tensor loss;
  {
    auto autocast = precision_->autocast();  // native O1 only
    loss = session_.task->train_loss(batch, device_);
  }
  const double loss_value = loss.item<double>();
  lap(times.forward, phase_start);
  const std::string diverged = precision_->check_loss(loss_value);
  if (!diverged.empty()) {
    throw RunStopped(Outcome::kDiverged, diverged + " at epoch " + std::to_string(epoch) +
                                             " step " + std::to_string(step_index));
  }
  // amp: loss x scale -> backward -> unscale/check -> step or skip -> masters -> scale.
  const bool overflow = precision_->backward(loss);
  lap(times.backward, phase_start);
  precision_->step(overflow, *session_.optimizer, global_step_ + 1);
  lap(times.optimizer, phase_start);
  return loss_value;
}

double RunTraining::parallel_step(const data::Batch& batch, int64_t n, int64_t epoch,
                                  int64_t step_index, records::EpochTimes& times,
                                  Clock::time_point& phase_start) {
  reducer_->prepare();
  dist::broadcast_buffers(*group_, buffers_);  // rank 0's BatchNorm statistics, as DDP
  auto average = [&] {
    comm_seconds_ += reducer_->finish();
    if (fault_ && fault_->first == rank_ && fault_->second == global_step_ + 1) {
      auto params = session_.task->module().parameters();
      torch::NoGradGuard no_grad;
      if (!params.empty() && params[0].grad().defined()) {
        params[0].mutable_grad().fill_(std::numeric_limits<float>::infinity());
      }
    }
  };
  bool overflow = false;
  double loss_value = 0;
  if (n > 0) {
    torch::Tensor loss;
    {
      auto autocast = precision_->autocast();
      loss = session_.task->train_loss(batch, device_);
    }
    loss_value = loss.item<double>();
    lap(times.forward, phase_start);
    overflow = precision_->backward(loss, average);
    lap(times.backward, phase_start);
  } else {  // every sample of this rank's batch was corrupt: it still takes part
    average();
    overflow = precision_->engine().unscale_and_check();
  }
  const auto request = recorder_.stop_request();
  const auto& slots = precision_->engine().fp8();
  const StepVote vote = StepVote::of(loss_value, n, overflow,
                                     request && request->outcome != Outcome::kLost,
                                     request && request->outcome == Outcome::kLost,
                                     slots ? slots->slot_count() : 0);
  const auto vote_start = Clock::now();
  torch::Tensor wire = vote.to_wire();
  group_->allreduce(wire);
  comm_seconds_ += seconds_since(vote_start);
  const StepVote total = StepVote::from_wire(wire);
  const std::string own = request ? request->message : "";
  if (total.lost > 0) {
    throw RunStopped(Outcome::kLost, vote.lost && !own.empty()
                                         ? own
                                         : "rank 0 lost its claim on run " + run_.name);
  }
  if (total.stop > 0) {  // the ranks stop together; the one that asked says why (a prune decision)
    throw RunStopped(
        vote.stop ? request->outcome : Outcome::kInterrupted,
        vote.stop && !own.empty() ? own : "interrupted in epoch " + std::to_string(epoch));
  }
  // One loss per step for every rank (the mean over every rank's samples; inf/NaN when some
  // rank's was), so every rank's DivergenceWatch sees what a single process would.
  loss_value = total.non_finite > 0 ? std::numeric_limits<double>::quiet_NaN()
               : total.samples > 0  ? total.loss_sum / total.samples
                                    : 0.0;
  if (total.non_finite > 0 || total.samples > 0) {  // (no rank had a sample: no loss to judge)
    const std::string diverged = precision_->check_loss(loss_value);
    if (!diverged.empty()) {
      throw RunStopped(Outcome::kDiverged, diverged + " at epoch " + std::to_string(epoch) +
                                               " step " + std::to_string(step_index));
    }
  }
  precision_->step(total.overflow > 0, *session_.optimizer, global_step_ + 1,
                   [&](amp::Fp8State& fp8) {  // every rank's FP8 amaxes of the step
                     if (total.fp8_slots_differ(world_)) {  // a rank that quantised nothing
                       fp8.add_slots(dist::union_over_ranks(*group_, fp8.slot_list()));
                     }
                     std::vector<float> amaxes = fp8.step_amaxes();
                     dist::allreduce_amax(*group_, amaxes);
                     fp8.set_step_amaxes(amaxes);
                   });
  lap(times.optimizer, phase_start);
  return loss_value;
}

namespace {

// What the steps of an epoch add up to: the mean of the finite losses, the throughput of the
// steps past schedule.skip_steps, the samples trained and skipped; the record's training fields.
struct EpochTally {
  double loss_sum = 0, fps_sum = 0, fps_min = 0, fps_max = 0, lr = 0, step_seconds = 0;
  int64_t fps_n = 0, skipped = 0, images = 0, finite_losses = 0;
  double timed_seconds = 0;  // the timed steps, back to back: one window of wall time
  int64_t timed_images = 0;

  // A step of `n` samples with loss `loss` that took `dt` seconds; its throughput counts towards
  // the mean, min and max when `timed`. Returns that throughput (samples / s).
  double add_step(double loss, int64_t n, double dt, bool timed) {
    if (std::isfinite(loss)) {
      loss_sum += loss;
      ++finite_losses;
    }
    images += n;
    step_seconds += dt;
    const double fps = dt > 0 ? static_cast<double>(n) / dt : 0;
    if (timed) {
      timed_seconds += dt;
      timed_images += n;
      fps_sum += fps;
      fps_min = fps_n == 0 ? fps : std::min(fps_min, fps);
      fps_max = std::max(fps_max, fps);
      ++fps_n;
    }
    return fps;
  }

  void fill(records::EpochRecord& record) const {
    record.lr = lr;
    record.train_loss = finite_losses ? loss_sum / static_cast<double>(finite_losses)
                                      : std::numeric_limits<double>::quiet_NaN();
    record.train_fps_mean = fps_n ? fps_sum / static_cast<double>(fps_n) : 0;
    record.train_fps_min = fps_min;
    record.train_fps_max = fps_max;
    record.skipped_samples = skipped;
    record.metrics["train_images"] = static_cast<double>(images);
    // Images over the elapsed time of the timed steps (each step's time runs from the end of
    // the one before, which read its loss from the device): the throughput of the window, where
    // train_fps_mean averages per-step rates.
    if (timed_seconds > 0) {
      record.metrics["train_fps_elapsed"] = static_cast<double>(timed_images) / timed_seconds;
    }
  }
};

}  // namespace

records::EpochRecord RunTraining::train_epoch(int64_t epoch) {
  epoch_start_ = Clock::now();
  const auto epoch_start = epoch_start_;
  train_opts_.epoch = static_cast<uint64_t>(epoch);
  place_batches(train_opts_);
  data::Loader loader(train_set_, train_opts_);
  const int64_t steps = loader.num_batches();
  session_.task->module().train();
  Progress progress(options_.progress, options_.progress_tty, settings_.log.every_steps, epoch,
                    epochs_, steps);
  EpochTally tally;
  int64_t step = 0;
  comm_seconds_ = 0;
  precision_->begin_epoch(/*fresh=*/epoch == first_epoch() && start_.fresh_scaler, global_step_);
  records::EpochTimes times;  // where the epoch's time goes (store.h)
  std::string trace;
  auto step_start = Clock::now();
  auto phase_start = step_start;
  while (auto batch = loader.next()) {
    lap(times.data_wait, phase_start);
    if (!stepped_here_) {
      times.startup = g_stepped.exchange(true) ? seconds_since(began_) : process_age_seconds();
      stepped_here_ = true;
    }
    profiler_->begin_step(global_step_);
    if (!group_) stop_if_asked(epoch);  // (ranks of a job agree on a stop in parallel_step)
    tally.skipped += batch->skipped;
    const int64_t n = batch->size;
    if (n == 0 && !group_) {
      phase_start = Clock::now();
      continue;
    }
    tally.lr = schedule_->lr_at(epoch, step, steps);
    set_lr(*session_.optimizer, tally.lr);
    precision_->zero_grad();  // model and master gradients
    lap(times.optimizer, phase_start);
    const double loss_value = group_ ? parallel_step(*batch, n, epoch, step, times, phase_start)
                                     : local_step(*batch, epoch, step, times, phase_start);
    if (auto path = profiler_->end_step(global_step_); !path.empty()) trace = path;
    ++global_step_;
    const double dt = seconds_since(step_start);
    step_start = Clock::now();
    const double fps = tally.add_step(loss_value, n, dt, /*timed=*/step >= skip_steps_);
    progress.step(step, loss_value, fps * world_, seconds_since(epoch_start));
    ++step;
    phase_start = Clock::now();  // the next batch's wait starts now
  }
  if (auto path = profiler_->finish(); !path.empty()) trace = path;
  if (step == 0) {
    throw DataError("epoch " + std::to_string(epoch) + " of run " + run_.name +
                    " produced no training batch: " + train_set_->describe() +
                    " holds fewer samples than data.batch_size=" + std::to_string(batch_size_) +
                    (world_ > 1 ? " x " + std::to_string(world_) + " processes" : ""));
  }

  records::EpochRecord record;
  record.run_id = run_.id;
  record.epoch = static_cast<int>(epoch);
  record.global_step = global_step_;
  tally.fill(record);
  record.times = times;
  record.profile_trace = trace;
  if (group_) combine_over_ranks(record, step, tally.step_seconds);
  return record;
}

void RunTraining::combine_over_ranks(records::EpochRecord& record, int64_t steps,
                                     double step_seconds) {
  // Global figures: img/s summed over the ranks; each rank's mean, slowest and fastest.
  const auto elapsed = record.metrics.find("train_fps_elapsed");
  torch::Tensor sums = torch::tensor(
      {record.train_fps_mean, record.train_fps_min, record.train_fps_max, comm_seconds_,
       step_seconds, record.metrics.at("train_images"),
       static_cast<double>(record.skipped_samples),
       elapsed == record.metrics.end() ? 0.0 : elapsed->second},
      torch::kDouble);
  torch::Tensor low = torch::tensor({record.train_fps_mean}, torch::kDouble);
  torch::Tensor high = low.clone();
  group_->allreduce(sums);
  group_->allreduce(low, dist::ProcessGroup::Op::kMin);
  group_->allreduce(high, dist::ProcessGroup::Op::kMax);
  auto a = sums.accessor<double, 1>();
  record.train_fps_mean = a[0];
  record.train_fps_min = a[1];
  record.train_fps_max = a[2];
  record.skipped_samples = static_cast<int64_t>(a[6]);
  record.metrics["train_images"] = a[5];
  if (a[7] > 0) record.metrics["train_fps_elapsed"] = a[7];  // the ranks' summed, as the mean's
  record.metrics["rank_fps_min"] = low.item<double>();
  record.metrics["rank_fps_max"] = high.item<double>();
  record.metrics["allreduce_ms"] = 1000.0 * a[3] / static_cast<double>(world_ * steps);
  record.metrics["allreduce_share"] = a[4] > 0 ? a[3] / a[4] : 0.0;
  record.metrics["world_size"] = static_cast<double>(world_);
}

void RunTraining::evaluate_epoch(int64_t epoch, records::EpochRecord& record) {
  // Every rank evaluates and rank 0 saves the model with rank 0's statistics.
  if (group_) dist::broadcast_buffers(*group_, buffers_);
  const auto eval_start = Clock::now();
  if (val_set_) {
    for (auto& [name, value] : evaluate(epoch)) record.metrics[name] = value;
  }
  record.times->eval = seconds_since(eval_start);
  precision_->end_epoch(record);  // loss_scale*, overflow/skipped steps, scale events
}

void RunTraining::record_epoch(int64_t epoch, records::EpochRecord& record) {
  record.epoch_seconds = seconds_since(epoch_start_);  // training and evaluation
  recorder_.check_claim();  // still ours? (another holder writes the same file names)
  const std::string dir = recorder_.checkpoint_dir();
  if (!dir.empty() && ((epoch + 1) % checkpoint_every_ == 0 || epoch + 1 == epochs_)) {
    const auto save_start = Clock::now();
    record.checkpoint = save_checkpoint((fs::path(dir) / checkpoint_file_name(epoch)).string(),
                                        session_.task->module(),
                                        *session_.optimizer,
                                        CheckpointMeta{epoch, global_step_, run_.config_hash},
                                        &precision_->engine());
    record.times->checkpoint = seconds_since(save_start);
  }
  recorder_.record_epoch(record);
  std::string line = "run " + run_.name + " epoch " + std::to_string(epoch) +
                     ": train_loss " + std::to_string(record.train_loss) +
                     metric_text(record.metrics, shown_metrics_) + " " +
                     std::to_string(static_cast<int64_t>(record.train_fps_mean)) + " img/s, " +
                     hms(record.epoch_seconds);
  if (record.skipped_samples) {
    line += ", " + std::to_string(record.skipped_samples) + " corrupt samples skipped";
  }
  recorder_.note(line, /*warning=*/false);
}

std::string RunTraining::finish() {
  const auto rows = recorder_.epochs();
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
  nlohmann::ordered_json j;
  j["run"] = run_.name;
  j["model"] = settings_.model.name;
  j["local_rank"] = options_.cluster ? options_.cluster->env().local_rank : 0;
  j["world_size"] = world_;
  j["batch_size"] = batch_size_;  // per process, as the seed's JSON
  j["global_batch"] = batch_size_ * world_;
  j["epochs"] = epochs_;
  j["training_step_per_epoch"] = settings_.schedule.training_step_per_epoch;
  j["eval_step_per_epoch"] = eval_steps_;
  j["acc1"] = last_metric("acc1");
  j["acc5"] = last_metric("acc5");
  j["device"] = device_.str();
  j["skip_steps"] = skip_steps_;
  j["train_fps_mean"] = fps_n ? fps_sum / fps_n : 0.0;
  j["train_fps_min"] = fps_min;
  j["train_fps_max"] = fps_max;
  j["training_time"] = hms(seconds);
  // MFU (docs/PERFORMANCE.md): of the mean img/s above; null when the work or peak is unknown.
  const double fps = fps_n ? fps_sum / fps_n : 0.0;
  auto known = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  j["train_gflop_per_sample"] = known(work_.train_flops_per_sample / 1e9);
  j["achieved_tflops"] = known(fps * work_.train_flops_per_sample / 1e12);
  j["peak_tflops"] = known(work_.peak_flops / 1e12);
  const auto mfu = work_.mfu(fps);
  j["mfu"] = mfu ? nlohmann::json(*mfu) : nlohmann::json(nullptr);
  j["peak_source"] = work_.peak_source;
  return j.dump();
}

// ---------------------------------------------------------------------------------------------
// The loop and its entry points

void request_stop() { amptune::request_stop(); }
bool stop_requested() { return amptune::stop_requested(); }

namespace {

RunResult train_phases(Recorder& recorder, const RunInput& run, const RunOptions& options,
                       Ending& ending) {
  RunTraining training(recorder, run, options);
  training.set_up();
  training.restore();
  training.evaluate_initial();
  for (int64_t epoch = training.first_epoch(); epoch < training.epochs(); ++epoch) {
    records::EpochRecord record = training.train_epoch(epoch);
    training.evaluate_epoch(epoch, record);
    training.record_epoch(epoch, record);
    if (options.stop_after_epoch && epoch >= *options.stop_after_epoch &&
        epoch + 1 < training.epochs()) {
      throw RunStopped(Outcome::kInterrupted,
                       "stopped after epoch " + std::to_string(epoch) + " as asked");
    }
  }
  ending = Ending::kDone;
  return RunResult{Outcome::kDone, "", training.finish()};
}

}  // namespace

RunResult train_run(Recorder& recorder, const RunInput& run, const RunOptions& options) {
  const GracefulStop graceful;  // a signal stops the run at the next step (process.h)
  RunResult result;
  Ending ending = Ending::kFailed;
  try {
    result = train_phases(recorder, run, options, ending);
  } catch (const RunStopped& e) {
    result = RunResult{e.outcome, e.what(), ""};
    ending = e.outcome == Outcome::kLost       ? Ending::kUntouched
             : e.outcome == Outcome::kDiverged ? Ending::kDiverged
             : e.outcome == Outcome::kPruned   ? Ending::kPruned
                                               : Ending::kPending;
  } catch (const records::ClaimLostError& e) {
    // Another process took the run over (this one was presumed dead): it owns the run's rows
    // and files now, so nothing more is written here.
    result = RunResult{Outcome::kLost, e.what(), ""};
    ending = Ending::kUntouched;
  } catch (const RankLostError& e) {
    // A rank is gone: the run goes back to pending, resumable from its last checkpoint.
    result = RunResult{Outcome::kRankLost, e.what(), ""};  // (logged by the caller)
    ending = Ending::kPending;
  } catch (const LegacyCheckpointError& e) {
    // An old-format checkpoint without the opt-in: the run fails this time but stays pending
    // with its checkpoints, so the same command with the opt-in continues it.
    result = RunResult{Outcome::kFailed, e.what(), ""};
    ending = Ending::kPending;
  } catch (const std::exception& e) {
    result = RunResult{Outcome::kFailed, e.what(), ""};
    ending = Ending::kFailed;
  }
  try {
    recorder.end(ending, result.message, result.summary_json);
  } catch (const std::exception& e) {  // the run's row could not be finished: it failed
    result = RunResult{Outcome::kFailed, e.what(), ""};
    recorder.end(Ending::kFailed, result.message, "");
  }
  return result;
}

void lead_run(dist::Cluster& cluster, const RunInput& run) {
  cluster.publish(run_message(run));
}

RunResult follow_run(const RunInput& run, const RunOptions& options) {
  RunOptions o = options;
  o.progress = false;
  FollowerRecorder recorder(run.name, options.cluster ? options.cluster->rank() : 0);
  return train_run(recorder, run, o);
}

std::optional<RunInput> next_run(dist::Cluster& cluster, int* leader_exit) {
  const auto j = nlohmann::json::parse(cluster.receive());
  if (j.at("type") == "end") {
    if (leader_exit) *leader_exit = j.value("exit", 0);
    return std::nullopt;
  }
  const std::string name = j.at("name").get<std::string>();
  RunInput run(Config::from_json(j.at("config_json").get<std::string>(), "run " + name));
  run.id = j.at("id").get<int64_t>();
  run.name = name;
  run.sweep_name = j.at("sweep").get<std::string>();
  run.label = j.at("label").get<std::string>();
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
