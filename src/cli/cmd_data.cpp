// `amptune data <action>`: options and output of the data-set utilities (app/artifacts/data.h).
#include <iostream>

#include "app/artifacts/data.h"
#include "cli/commands.h"
#include "core/error.h"

namespace amptune::cli {
namespace {

int export_imagefolder(const std::vector<std::string>& args) {
  std::string idx, out, naming;
  int64_t limit = -1;
  int quality = 95;
  Options opts("data export-imagefolder",
               "usage: amptune data export-imagefolder --out DIR [options]\n\nWrites IDX images "
               "(the real Fashion-MNIST by default) as an ImageNet-style folder of JPEG files: "
               "train -> OUT/train, t10k -> OUT/val.");
  opts.add()("idx", po::value(&idx)->default_value("/usr/share/datasets/fashion-mnist"),
             "directory of the IDX files ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])")(
      "out", po::value(&out), "output directory (OUT/train/<class>/*.JPEG, OUT/val/...)")(
      "limit", po::value(&limit)->default_value(-1),
      "at most this many images per split, balanced over classes; -1 = all")(
      "quality", po::value(&quality)->default_value(95), "JPEG quality 1..100")(
      "names", po::value(&naming)->default_value("auto"),
      "class folder names: auto | fashion | generic (class_0, ...)");
  if (!opts.parse(args)) return 0;
  if (out.empty()) throw UsageError("amptune data export-imagefolder needs --out DIR");
  if (quality < 1 || quality > 100) throw UsageError("--quality must be in 1..100");
  data::ClassNaming mode = data::ClassNaming::kAuto;
  if (naming == "fashion") {
    mode = data::ClassNaming::kFashion;
  } else if (naming == "generic") {
    mode = data::ClassNaming::kGeneric;
  } else if (naming != "auto") {
    throw UsageError("--names must be auto, fashion or generic, got " + naming);
  }
  const data::ExportStats stats = app::export_imagefolder(idx, out, limit, quality, mode);
  for (auto& [split, n] : stats.images) {
    std::cout << split << ": " << n << " images\n";
  }
  std::cout << stats.bytes << " JPEG bytes in " << stats.out_dir << " (" << stats.class_names.size()
            << " classes)\n";
  return 0;
}

int synth_rootnet(const std::vector<std::string>& args) {
  data::SynthOptions o;
  int64_t seed = 0;
  std::string unit;
  Options opts("data synth-rootnet",
               "usage: amptune data synth-rootnet --format F --out DIR [options]\n\nWrites a "
               "small RootNet data set in the official JSON + JPEG layout of F: people as "
               "articulated 3D stick bodies (heights 1.5-1.9 m, random pose, root depth 2-7.5 m) "
               "seen through pinhole cameras (docs/ROOTNET.md).");
  opts.add()("format", po::value(&o.format), "h36m | muco | mupots | mpii (the official layouts)")(
      "out", po::value(&o.out), "root directory of the data set (e.g. data/synth/MuCo)")(
      "seed", po::value(&seed)->default_value(0), "random seed (same seed, same files)")(
      "images", po::value(&o.images)->default_value(200),
      "images to write (h36m: per subject, subjects 1, 5, 6, 7, 8, 9, 11)")(
      "width", po::value(&o.width)->default_value(320), "image width in pixels")(
      "height", po::value(&o.height)->default_value(240), "image height in pixels")(
      "unit", po::value(&unit)->default_value("mm"),
      "mm | m: the unit of the 3D coordinates written (muco, mupots); with m and "
      "rootnet.bbox_real [2, 2] k is a few units and casts.int32 [k_value] cuts it by tens of "
      "percent (experiments/rootnet_int32_k.yaml, docs/ROOTNET.md)");
  if (!opts.parse(args)) return 0;
  if (unit != "mm" && unit != "m") throw UsageError("--unit must be mm or m, got '" + unit + "'");
  o.unit_mm = unit == "m" ? 1000.0 : 1.0;
  if (o.format.empty() || o.out.empty()) {
    throw UsageError(
        "amptune data synth-rootnet needs --format h36m|muco|mupots|mpii and --out DIR");
  }
  if (seed < 0) throw UsageError("--seed must be >= 0");
  o.seed = static_cast<uint64_t>(seed);
  const data::SynthStats stats = app::synth_rootnet(o);
  std::cout << o.format << ": " << stats.images << " images, " << stats.people << " people";
  if (stats.invalid_people) std::cout << " (" << stats.invalid_people << " marked is_valid 0)";
  std::cout << " in " << o.out << "\n";
  for (auto& f : stats.files) std::cout << "  " << f << "\n";
  return 0;
}

// "layer3.0.conv1.weight=30000" -> {name, 30000}; UsageError otherwise.
train::WeightScale parse_scale(const std::string& text) {
  const auto eq = text.rfind('=');
  train::WeightScale scale;
  size_t used = 0;
  if (eq == std::string::npos || eq == 0) {
    throw UsageError("--scale takes NAME=FACTOR (layer3.0.conv1.weight=30000), got '" + text + "'");
  }
  scale.name = text.substr(0, eq);
  const std::string factor = text.substr(eq + 1);
  try {
    scale.factor = std::stod(factor, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != factor.size()) {
    throw UsageError("--scale " + scale.name + ": the factor '" + factor + "' is not a number");
  }
  return scale;
}

int plant_weights(const std::vector<std::string>& args) {
  std::string sweep, out;
  std::vector<std::string> sets, only, scale_args;
  Options opts("data plant-weights",
               "usage: amptune data plant-weights SWEEP.yaml --scale NAME=FACTOR... --out "
               "FILE.pt [options]\n\nWrites the initial weights of the sweep's model (its first "
               "cell, or the first --only selects), seeded as a run seeds them (model.weights is "
               "not loaded: the file is what model.weights is to name), with the named "
               "parameters or buffers multiplied by their factors: a precision fault planted "
               "for a test or an example (docs/AMP.md \"Planting an overflow\"). The file is a "
               "plain state dict, as `amptune export` writes and model.weights reads.");
  opts.positional(&sweep).sweep_selection(&sets, &only);
  opts.add()("scale", po::value(&scale_args)->composing(),
             "NAME=FACTOR: multiply the tensor NAME (layer3.0.conv1.weight) by FACTOR, or "
             "its K-th slice along the first dimension with NAME[K]=FACTOR; repeatable")(
      "out", po::value(&out), "the state dict to write (atomically)");
  if (!opts.parse(args)) return 0;
  if (sweep.empty()) throw UsageError("amptune data plant-weights needs a sweep file");
  if (out.empty()) throw UsageError("amptune data plant-weights needs --out FILE.pt");
  std::vector<train::WeightScale> scales;
  for (const auto& text : scale_args) scales.push_back(parse_scale(text));
  const train::ExportResult written = app::plant_weights(sweep, sets, only, scales, out);
  std::cout << written.path << ": " << written.tensors << " tensors, " << written.bytes << " bytes";
  for (size_t i = 0; i < scales.size(); ++i) {
    std::cout << (i ? ", " : "; ") << scales[i].name << " x " << scales[i].factor;
  }
  std::cout << "\n";
  return 0;
}

// The actions of `amptune data`: its usage text and its dispatch both come from this list.
struct DataAction {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const DataAction kDataActions[] = {
    {"export-imagefolder", "write IDX images as an ImageNet-style JPEG folder", export_imagefolder},
    {"synth-rootnet", "write a synthetic RootNet set (h36m|muco|mupots|mpii layout)",
     synth_rootnet},
    {"plant-weights", "write a model's seeded initial weights with tensors scaled", plant_weights},
};

std::string data_usage() {
  std::string usage = "usage: amptune data <action> [options]\n\nactions:\n";
  for (const DataAction& action : kDataActions) {
    const std::string name = action.name;
    usage += "  " + name + std::string(name.size() < 21 ? 21 - name.size() : 1, ' ') +
             action.summary + "\n";
  }
  return usage;
}

}  // namespace

int cmd_data(const Invocation& inv) {
  if (inv.args.empty() || inv.args[0] == "--help" || inv.args[0] == "-h") {
    std::cout << data_usage();
    return inv.args.empty() ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  const std::vector<std::string> rest(inv.args.begin() + 1, inv.args.end());
  for (const DataAction& action : kDataActions) {
    if (inv.args[0] == action.name) return action.run(rest);
  }
  throw UsageError("unknown data action '" + inv.args[0] + "'\n" + data_usage());
}

}  // namespace amptune::cli
