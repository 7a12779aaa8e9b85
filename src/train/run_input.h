// A run as train takes it: who the run is and its configuration as typed values, resolved once
// (app/run/run_input.h's resolve_run from the run's database row; on the other ranks of a
// data-parallel job, from the leader's message: trainer.cpp) and passed down. Train reads no
// database row and parses no stored configuration. No torch in this header: app includes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/config.h"
#include "core/settings.h"
#include "records/records.h"

namespace amptune::train {

class RunInput {
 public:
  // The configuration and its settings (Settings::from: read once, here).
  explicit RunInput(Config config)
      : config_(std::move(config)), settings_(Settings::from(config_)) {}

  const Config& config() const { return config_; }
  const Settings& settings() const { return settings_; }

  int64_t id = 0;
  std::string name;   // "<sweep>/<cell_index>-<hash8>", unique in its database
  std::string label;  // the swept values, for messages
  std::string sweep_name;
  int cell_index = 0;
  std::string axes_json;  // the swept keys and values (a fork plans its own from them)
  // Identity: runs.config_hash, which checkpoints are owned by (train/checkpoint.h owner_hashes),
  // its value before migration 12 re-hashed it ("" when the same), and the data's fingerprint.
  std::string config_hash;
  std::string legacy_config_hash;
  std::string data_fingerprint;
  std::optional<records::ForkOrigin> fork;  // set for forks: the parent's run and epoch

 private:
  Config config_;
  Settings settings_;
};

}  // namespace amptune::train
