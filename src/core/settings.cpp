#include "core/settings.h"

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/error.h"

namespace amptune {
namespace {

// `text`, the value of `key`, as `parse` reads it (core/words.h). The config has checked the
// word against the key's choices; a word the schema allows and `parse` lacks is named here.
template <class Parse>
auto word_of(const std::string& key, const std::string& text, Parse parse) {
  const auto value = parse(text);
  if (!value) throw ConfigError(key + ": no value for the word '" + text + "'");
  return *value;
}

// Config's typed getters for one section, noting every key it reads.
class Reader {
 public:
  Reader(const Config& config, std::vector<KeyRead>* reads) : config_(config), reads_(reads) {}
  Reader& section(const char* name) {
    section_ = name;
    return *this;
  }

  int64_t get_int(const std::string& key) { return note(key).get_int(key); }
  double get_double(const std::string& key) { return note(key).get_double(key); }
  bool get_bool(const std::string& key) { return note(key).get_bool(key); }
  std::string get_string(const std::string& key) { return note(key).get_string(key); }
  std::vector<int64_t> get_int_list(const std::string& key) { return note(key).get_int_list(key); }
  std::vector<double> get_double_list(const std::string& key) {
    return note(key).get_double_list(key);
  }
  std::vector<std::string> get_string_list(const std::string& key) {
    return note(key).get_string_list(key);
  }
  // A string key of fixed words as `parse` reads it (core/words.h).
  template <class Parse>
  auto get_word(const std::string& key, Parse parse) {
    return word_of(key, get_string(key), parse);
  }
  // A loss_scale key: a word ("auto", "dynamic") or a number.
  LossScale get_loss_scale(const std::string& key) {
    const nlohmann::json& v = note(key).at(key);
    LossScale out;
    if (v.is_string()) {
      out.word = word_of(key, v.get<std::string>(), parse_loss_scale_word);
    } else {
      out.value = v.get<double>();
    }
    return out;
  }

 private:
  const Config& note(const std::string& key) {
    if (reads_) reads_->push_back(KeyRead{section_, key});
    return config_;
  }

  const Config& config_;
  std::vector<KeyRead>* reads_;
  std::string section_;
};

ModelSettings read_model(Reader& in) {
  ModelSettings s;
  s.name = in.get_string("model.name");
  s.num_classes = in.get_int("model.num_classes");
  s.in_channels = in.get_int("model.in_channels");
  s.width = in.get_double("model.width");
  s.small_input = in.get_bool("model.small_input");
  s.memory_format = in.get_word("model.memory_format", parse_memory_format);
  s.weights = in.get_string("model.weights");
  s.backbone_depth = in.get_int("model.backbone_depth");
  s.backbone_weights = in.get_string("model.backbone_weights");
  s.path = in.get_string("model.path");
  s.task = in.get_word("model.task", parse_model_task);
  return s;
}

DataSettings read_data(Reader& in) {
  DataSettings s;
  s.format = in.get_word("data.format", parse_data_format);
  s.root = in.get_string("data.root");
  s.train_split = in.get_string("data.train_split");
  s.val_split = in.get_string("data.val_split");
  s.image_size = in.get_int("data.image_size");
  s.resize_size = in.get_int("data.resize_size");
  s.crop_scale = in.get_double_list("data.crop_scale");
  s.augment = in.get_bool("data.augment");
  s.mean = in.get_double_list("data.mean");
  s.std = in.get_double_list("data.std");
  s.batch_size = in.get_int("data.batch_size");
  s.eval_batch_size = in.get_int("data.eval_batch_size");
  s.workers = in.get_int("data.workers");
  s.prefetch = in.get_int("data.prefetch");
  s.max_image_pixels = in.get_int("data.max_image_pixels");
  s.synthetic_samples = in.get_int("data.synthetic_samples");
  return s;
}

OptimSettings read_optim(Reader& in) {
  OptimSettings s;
  s.name = in.get_word("optim.name", parse_optimizer_name);
  s.lr = in.get_double("optim.lr");
  s.momentum = in.get_double("optim.momentum");
  s.nesterov = in.get_bool("optim.nesterov");
  s.weight_decay = in.get_double("optim.weight_decay");
  s.betas = in.get_double_list("optim.betas");
  s.eps = in.get_double("optim.eps");
  s.fused = in.get_bool("optim.fused");
  return s;
}

ScheduleSettings read_schedule(Reader& in) {
  ScheduleSettings s;
  s.epochs = in.get_int("schedule.epochs");
  s.eval_initial = in.get_bool("schedule.eval_initial");
  s.lr_policy = in.get_word("schedule.lr_policy", parse_lr_policy);
  s.lr_dec_epoch = in.get_int_list("schedule.lr_dec_epoch");
  s.lr_dec_factor = in.get_double("schedule.lr_dec_factor");
  s.warmup_epochs = in.get_double("schedule.warmup_epochs");
  s.training_step_per_epoch = in.get_int("schedule.training_step_per_epoch");
  s.eval_step_per_epoch = in.get_int("schedule.eval_step_per_epoch");
  s.skip_steps = in.get_int("schedule.skip_steps");
  return s;
}

CheckpointSettings read_checkpoint(Reader& in) {
  CheckpointSettings s;
  s.every = in.get_int("checkpoint.every");
  s.keep_last = in.get_int("checkpoint.keep_last");
  s.keep_best = in.get_int("checkpoint.keep_best");
  s.keep_epochs = in.get_int_list("checkpoint.keep_epochs");
  s.dir = in.get_string("checkpoint.dir");
  return s;
}

AmpSettings read_amp(Reader& in) {
  AmpSettings s;
  s.opt_level = in.get_word("amp.opt_level", parse_opt_level);
  s.dtype = in.get_word("amp.dtype", parse_dtype);
  s.loss_scale = in.get_loss_scale("amp.loss_scale");
  s.min_loss_scale = in.get_double("amp.min_loss_scale");
  s.max_loss_scale = in.get_double("amp.max_loss_scale");
  s.growth_interval = in.get_int("amp.growth_interval");
  s.keep_batchnorm_fp32 = in.get_word("amp.keep_batchnorm_fp32", parse_auto_bool);
  s.master_weights = in.get_word("amp.master_weights", parse_auto_bool);
  s.combine_grad = in.get_bool("amp.combine_grad");
  s.fp32_modules = in.get_string_list("amp.fp32_modules");
  s.backend = in.get_word("amp.backend", parse_amp_backend);
  s.fp8.enabled = in.get_bool("amp.fp8.enabled");
  s.fp8.format = in.get_word("amp.fp8.format", parse_fp8_format_set);
  s.fp8.recipe = in.get_word("amp.fp8.recipe", parse_fp8_recipe);
  s.fp8.margin = in.get_int("amp.fp8.margin");
  s.fp8.amax_history_len = in.get_int("amp.fp8.amax_history_len");
  s.fp8.amax_compute = in.get_word("amp.fp8.amax_compute", parse_amax_compute);
  s.fp8.skip_modules = in.get_string_list("amp.fp8.skip_modules");
  s.fp8.gemm = in.get_word("amp.fp8.gemm", parse_fp8_gemm_path);
  return s;
}

DistSettings read_dist(Reader& in) {
  DistSettings s;
  s.backend = in.get_word("dist.backend", parse_dist_backend);
  s.bucket_mb = in.get_double("dist.bucket_mb");
  s.overlap = in.get_bool("dist.overlap");
  s.timeout_s = in.get_double("dist.timeout_s");
  s.sync_bn = in.get_bool("dist.sync_bn");
  return s;
}

RootNetSettings read_rootnet(Reader& in) {
  RootNetSettings s;
  s.train_sets = in.get_string_list("rootnet.train_sets");
  s.test_set = in.get_string("rootnet.test_set");
  s.h36m_root = in.get_string("rootnet.h36m_root");
  s.h36m_protocol = in.get_int("rootnet.h36m_protocol");
  s.h36m_train_every = in.get_int("rootnet.h36m_train_every");
  s.h36m_test_every = in.get_int("rootnet.h36m_test_every");
  s.muco_root = in.get_string("rootnet.muco_root");
  s.mupots_root = in.get_string("rootnet.mupots_root");
  s.mupots_bbox_file = in.get_string("rootnet.mupots_bbox_file");
  s.mpii_root = in.get_string("rootnet.mpii_root");
  s.input_size = in.get_int("rootnet.input_size");
  s.bbox_real = in.get_double_list("rootnet.bbox_real");
  s.rot_factor = in.get_double("rootnet.rot_factor");
  s.rot_prob = in.get_double("rootnet.rot_prob");
  s.flip_prob = in.get_double("rootnet.flip_prob");
  s.color_factor = in.get_double("rootnet.color_factor");
  return s;
}

}  // namespace

Settings Settings::from(const Config& config, std::vector<KeyRead>* reads) {
  Reader in(config, reads);
  Settings s;
  in.section("top-level");
  s.seed = in.get_int("seed");
  s.threads = in.get_int("threads");
  s.device = in.get_word("device", parse_device_choice);
  s.deterministic = in.get_bool("deterministic");
  s.cudnn_benchmark = in.get_bool("cudnn_benchmark");
  s.model = read_model(in.section("model"));
  s.data = read_data(in.section("data"));
  s.optim = read_optim(in.section("optim"));
  s.schedule = read_schedule(in.section("schedule"));
  s.checkpoint = read_checkpoint(in.section("checkpoint"));
  s.log.every_steps = in.section("log").get_int("log.every_steps");
  s.profile.steps = in.section("profile").get_int_list("profile.steps");
  s.amp = read_amp(in.section("amp"));
  s.dist = read_dist(in.section("dist"));
  s.rootnet = read_rootnet(in.section("rootnet"));
  s.casts.int32 = in.section("casts").get_string_list("casts.int32");
  return s;
}

}  // namespace amptune
