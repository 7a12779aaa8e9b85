// Checkpoint files: model parameters and buffers, optimizer state, amp state, position in training
// and RNG state as named tensors in the safetensors layout (data/safetensors.h), data only, so
// loading one runs no code (docs/SECURITY.md "Checkpoints"). Files are written atomically
// (core/files.h write_file_atomic) and identified by their sha256, which the database
// records.
//
// Tensor names: model.<parameter or buffer name>; optim.p<i>.momentum_buffer (SGD),
// optim.p<i>.{step, exp_avg, exp_avg_sq[, max_exp_avg_sq]} (Adam), i the parameter's position in
// the optimizer; amp.loss_scale (F64, 0-d), amp.unskipped (I64, 0-d), amp.master.<i> (the fp32
// master of model parameter i); fp8.<key>.<role>.history and .scale (F32, 1-d: the FP8 scaling
// state, amp::Fp8State::to_tensors; FP8 runs only); rng.cpu (the CPU generator's state, U8).
// __metadata__: format, epoch, global_step, config_hash, optimizer ("sgd" | "adam").
//
// Checkpoints of earlier releases are LibTorch (TorchScript) archives, which can run code when
// loaded: they are read only when AMPTUNE_TRUST_LEGACY_CHECKPOINTS=1 is set.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "records/records.h"
#include "train/run_input.h"

namespace amptune::amp {
class Engine;
}

namespace amptune::train {

struct CheckpointMeta {
  int64_t epoch = 0;        // the epoch this checkpoint ends (0-based)
  int64_t global_step = 0;  // optimizer steps done
  std::string config_hash;  // the run's config identity, checked on load
  std::string format = "amptune-checkpoint-2";  // "amptune-checkpoint-1": the archive format
};

// The environment variable that lets old-format (TorchScript archive) checkpoints load.
constexpr const char* kTrustLegacyEnv = "AMPTUNE_TRUST_LEGACY_CHECKPOINTS";

// An old-format checkpoint refused because kTrustLegacyEnv is not "1": not damage, so a resume
// stops on it (nothing written) instead of falling back to an older checkpoint.
class LegacyCheckpointError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Serialises the training state and writes it atomically to `path`; returns path, size, sha256.
// `amp`, when given, adds the mixed-precision state (fp32 masters, loss scale and clean-step
// counter). Throws EnvironmentError naming the path (e.g. disk full: exit code 9, an unwritable
// output); no partial file is left behind.
records::CheckpointFile save_checkpoint(const std::string& path, const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer,
                                      const CheckpointMeta& meta,
                                      const amp::Engine* amp = nullptr);

// The config hashes a checkpoint of `run` may carry (its meta.config_hash): the run's identity,
// and the identity it had before migration 12 re-hashed it, for checkpoints written before.
std::vector<std::string> owner_hashes(const RunInput& run);

// Loads the checkpoint file epoch row `row` names (row.checkpoint, which must be set). Maps the
// file read-only, verifies size and sha256 against the row's (skipped when its sha256 is empty),
// validates the layout, that the metadata's epoch and global_step are the row's (>= 0: the row,
// not the file, says where training stands), and that every tensor this model, optimizer and
// engine need is there with their shape and dtype (and no other), and only then loads into
// `model` (its tensors keep their device), `optimizer` and `amp` (when given: masters and scaler
// state) and restores the CPU generator state. Throws CheckpointError naming the path and the
// problem (missing, truncated, hash mismatch, malformed, another position than the row's, a
// tensor missing, unexpected or mis-shaped, a config hash not among `owners` when that is not
// empty; LibTorch errors and allocation failures included); LegacyCheckpointError for an
// old-format file without the opt-in; RunStopped (train/phases.h) when a stop is requested while
// the header is read. On an error before the load the model, optimizer and engine are unchanged.
CheckpointMeta load_checkpoint(const records::EpochRow& row, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               const std::vector<std::string>& owners,
                               amp::Engine* amp = nullptr);

// The bytes save_checkpoint writes, and load_checkpoint's reading of them with the same checks
// (no size / sha256 check; `origin` names them in errors): how the leader of a data-parallel run
// hands its restored state to the other ranks.
std::string checkpoint_bytes(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                             const CheckpointMeta& meta, const amp::Engine* amp = nullptr);
CheckpointMeta load_checkpoint_bytes(const std::string& bytes, const std::string& origin,
                                     torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                     const std::vector<std::string>& owners,
                                     amp::Engine* amp = nullptr);

// Copies the per-parameter state (momentum buffers; Adam moments and step counts) of `from` into
// `to`, matched by parameter order; the options (lr, momentum, ...) of `to` stay. For a fork that
// keeps its parent's optimizer state. Throws CheckpointError when the kinds or shapes differ.
void copy_optimizer_state(const torch::optim::Optimizer& from, torch::optim::Optimizer& to);

}  // namespace amptune::train
