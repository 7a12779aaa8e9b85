// Checkpoint files: model parameters and buffers, optimizer state, position in training and RNG
// state in one LibTorch archive. Files are written atomically (temp file, fsync, rename, fsync of
// the directory) and identified by their sha256, which the database records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "store/store.h"

namespace amptune::amp {
class Engine;
}

namespace amptune::train {

struct CheckpointMeta {
  int64_t epoch = 0;        // the epoch this checkpoint ends (0-based)
  int64_t global_step = 0;  // optimizer steps done
  std::string config_hash;  // the run's config identity, checked on load
  std::string format = "amptune-checkpoint-1";
};

// Serialises the training state and writes it atomically to `path`; returns path, size, sha256.
// `amp`, when given, adds the mixed-precision state (fp32 masters, loss scale and clean-step
// counter). Throws CheckpointError naming the path (e.g. disk full); no partial file is left
// behind.
store::CheckpointFile save_checkpoint(const std::string& path, const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer,
                                      const CheckpointMeta& meta,
                                      const amp::Engine* amp = nullptr);

// The config hashes a checkpoint of `run` may carry (its meta.config_hash): the run's identity,
// and the identity it had before migration 12 re-hashed it, for checkpoints written before.
std::vector<std::string> owner_hashes(const store::RunRow& run);

// Verifies size and sha256 against `expected` (skipped when expected.sha256 is empty), then loads
// into `model` and `optimizer` and restores the CPU generator state. Throws CheckpointError naming
// the path and the problem (missing, truncated, hash mismatch, a config hash not among `owners`
// when that is not empty). `amp`, when given, gets its masters and scaler state back (after the
// model).
CheckpointMeta load_checkpoint(const store::CheckpointFile& expected, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               const std::vector<std::string>& owners,
                               amp::Engine* amp = nullptr);

// The bytes save_checkpoint writes, and load_checkpoint's reading of them (no size / sha256
// check; `origin` names them in errors): how the leader of a data-parallel run hands its
// restored state to the other ranks.
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

// Writes bytes to path atomically (temp + fsync + rename + directory fsync).
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace amptune::train
