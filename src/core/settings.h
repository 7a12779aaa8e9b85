// A run's config as typed sections, read once:
//
//   const Settings s = Settings::from(config);    // every key of schemas/config.yaml, once
//   if (s.schedule.epochs == 0) ...               // instead of config.get_int("schedule.epochs")
//   make_optimizer(s.optim, params);              // a layer takes the section it needs
//
// One plain struct per group of keys (model.*, data.*, optim.*, ...); each field is named like
// its key's last part and has the C++ type of the key's schema type (int: int64_t, float:
// double, bool, string, *_list: std::vector). Values are the config's, already checked against
// the schema by Config (types, choices, bounds); the fields carry no defaults of their own. A
// key with a fixed set of words is an enum class of core/words.h (device, model.memory_format,
// model.task, data.format, optim.name, schedule.lr_policy, amp.opt_level, amp.dtype,
// amp.keep_batchnorm_fp32, amp.master_weights, amp.backend, amp.fp8.format / recipe /
// amax_compute / gemm, dist.backend; amp.loss_scale's words); a word is printed or stored through
// to_string.
// Cross-key checks stay where they are (amp::resolve_policy, train/plan.h validate_config).
// tests/unit/core/schema_sync_test.cpp proves that Settings::from reads every schema key
// exactly once, so a key added to the schema needs its field here. No torch in this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/words.h"

namespace amptune {

class Config;

struct ModelSettings {
  std::string name;  // a registered model (train/tasks.cpp)
  int64_t num_classes = 0;
  int64_t in_channels = 0;
  double width = 0;
  bool small_input = false;
  MemoryFormat memory_format = MemoryFormat::kAuto;  // what it resolves to: train/tasks.cpp
  std::string weights;           // path of a state dict; "" = random init
  int64_t backbone_depth = 0;    // rootnet
  std::string backbone_weights;  // rootnet; "" = random init
  std::string path;              // torchscript: the TorchScript file
  ModelTask task = ModelTask::kClassification;  // torchscript
};

struct DataSettings {
  DataFormat format = DataFormat::kImageFolder;
  std::string root;
  std::string train_split;
  std::string val_split;
  int64_t image_size = 0;
  int64_t resize_size = 0;
  std::vector<double> crop_scale;
  bool augment = false;
  std::vector<double> mean;
  std::vector<double> std;
  int64_t batch_size = 0;
  int64_t eval_batch_size = 0;  // 0 = batch_size
  int64_t workers = 0;
  int64_t prefetch = 0;
  int64_t max_image_pixels = 89478485;  // larger images are a DataError (decompression bombs)
  int64_t synthetic_samples = 0;        // data.format synthetic: samples per split
};

struct OptimSettings {
  OptimizerName name = OptimizerName::kSgd;
  double lr = 0;
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0;
  std::vector<double> betas;
  double eps = 0;
  bool fused = false;
};

struct ScheduleSettings {
  int64_t epochs = 0;  // 0 = evaluation only
  bool eval_initial = false;
  LrPolicy lr_policy = LrPolicy::kStep;
  std::vector<int64_t> lr_dec_epoch;
  double lr_dec_factor = 0;
  double warmup_epochs = 0;
  int64_t training_step_per_epoch = 0;  // -1 = the whole split
  int64_t eval_step_per_epoch = 0;      // -1 = the whole split, 0 = no evaluation
  int64_t skip_steps = 0;
};

struct CheckpointSettings {
  int64_t every = 0;
  int64_t keep_last = 0;
  int64_t keep_best = 0;
  std::vector<int64_t> keep_epochs;
  std::string dir;  // "" = beside the database
};

struct LogSettings {
  int64_t every_steps = 0;
};

struct ProfileSettings {
  std::vector<int64_t> steps;  // [] = off, else [first, last]
};

// amp.loss_scale: a word (auto, dynamic; -1 is stored as dynamic) or a static scale.
struct LossScale {
  std::optional<LossScaleWord> word;  // unset when static
  double value = 0;                   // the static scale when word is unset
};

// amp.fp8.*: FP8 GEMMs (what each key does: amp/fp8_gemm.h, docs/AMP.md "FP8: the recipe").
struct Fp8Settings {
  bool enabled = false;
  Fp8FormatSet format = Fp8FormatSet::kHybrid;
  Fp8Recipe recipe = Fp8Recipe::kDelayed;
  int64_t margin = 0;
  int64_t amax_history_len = 1024;
  AmaxCompute amax_compute = AmaxCompute::kMax;
  Fp8GemmPath gemm = Fp8GemmPath::kEmulate;
  std::vector<std::string> skip_modules;  // globs over module names
};

struct AmpSettings {
  OptLevel opt_level = OptLevel::kO0;  // what each level means: amp/policy.h
  Dtype dtype = Dtype::kFp16;
  LossScale loss_scale;
  double min_loss_scale = 0;
  double max_loss_scale = 0;
  int64_t growth_interval = 0;
  AutoBool keep_batchnorm_fp32 = AutoBool::kAuto;  // what auto means: amp/policy.h
  AutoBool master_weights = AutoBool::kAuto;
  bool combine_grad = false;
  std::vector<std::string> fp32_modules;  // globs over module names
  AmpBackend backend = AmpBackend::kAuto;
  Fp8Settings fp8;
};

struct DistSettings {
  DistBackend backend = DistBackend::kAuto;
  double bucket_mb = 0;
  bool overlap = false;
  double timeout_s = 0;
  bool sync_bn = false;
};

struct RootNetSettings {
  std::vector<std::string> train_sets;
  std::string test_set;
  std::string h36m_root;
  int64_t h36m_protocol = 0;
  int64_t h36m_train_every = 0;
  int64_t h36m_test_every = 0;
  std::string muco_root;
  std::string mupots_root;
  std::string mupots_bbox_file;  // "" = ground-truth boxes
  std::string mpii_root;
  int64_t input_size = 0;
  std::vector<double> bbox_real;
  double rot_factor = 0;
  double rot_prob = 0;
  double flip_prob = 0;
  double color_factor = 0;
};

struct CastSettings {
  std::vector<std::string> int32;  // casts.int32
};

// Which section read which key (Settings::from's record, for the schema-sync test).
struct KeyRead {
  std::string section;  // "model", "amp", ...; "top-level" for seed, threads, device, ...
  std::string key;      // dotted
};

struct Settings {
  int64_t seed = 0;
  int64_t threads = 0;  // 0 = number of cores
  DeviceChoice device = DeviceChoice::kAuto;  // which auto picks: train/session.h
  bool deterministic = false;  // CUDA: cuDNN's deterministic algorithms (train/tasks.cpp)
  bool cudnn_benchmark = true;  // CUDA: cuDNN's autotuner unless deterministic (train/tasks.cpp)
  ModelSettings model;
  DataSettings data;
  OptimSettings optim;
  ScheduleSettings schedule;
  CheckpointSettings checkpoint;
  LogSettings log;
  ProfileSettings profile;
  AmpSettings amp;
  DistSettings dist;
  RootNetSettings rootnet;
  CastSettings casts;

  // Reads every key of `config` (whose schema must be the builtin one or a superset of its
  // keys) exactly once; when `reads` is given, appends each key read with its section.
  // Throws ConfigError only for a schema that lacks a key or types it otherwise.
  static Settings from(const Config& config, std::vector<KeyRead>* reads = nullptr);
};

}  // namespace amptune
