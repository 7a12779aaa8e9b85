// The torch side of the readers: IDX and ImageFolder data sets, normalisation into tensors,
// make_dataset. Pixel work (decoding, transforms) lives in the torch-free image/transforms code.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>

#include <torch/torch.h>

#include "core/error.h"
#include "core/log.h"
#include "core/settings.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/image.h"
#include "data/rootnet_data.h"
#include "data/synthetic.h"
#include "data/transforms.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// (pixel / 255 - mean) / std per channel, HWC uint8 -> CHW float32, in plain loops: loader
// workers call this, and ATen's intra-op thread pool belongs to the training thread. A grey
// source (src_channels 1) is replicated into every output channel.
torch::Tensor to_normalised_tensor(const uint8_t* hwc, int height, int width, int src_channels,
                                   int channels, const std::vector<double>& mean,
                                   const std::vector<double>& std, bool flip) {
  torch::Tensor t = torch::empty({channels, height, width}, torch::kFloat32);
  float* out = t.data_ptr<float>();
  const size_t plane = static_cast<size_t>(height) * width;
  for (int c = 0; c < channels; ++c) {
    const float scale = static_cast<float>(1.0 / (255.0 * std[c]));
    const float bias = static_cast<float>(-mean[c] / std[c]);
    float* dst = out + c * plane;
    for (int y = 0; y < height; ++y) {
      const uint8_t* src =
          hwc + static_cast<size_t>(y) * width * src_channels + (src_channels == 1 ? 0 : c);
      float* row = dst + static_cast<size_t>(y) * width;
      for (int x = 0; x < width; ++x) {
        const int sx = flip ? width - 1 - x : x;
        row[x] = static_cast<float>(src[static_cast<size_t>(sx) * src_channels]) * scale + bias;
      }
    }
  }
  return t;
}

torch::Tensor label_tensor(int64_t label) {
  return torch::scalar_tensor(label, torch::TensorOptions().dtype(torch::kInt64));
}

void check_options(const TransformOptions& o) {
  if (o.channels != 1 && o.channels != 3) {
    throw DataError("image data needs 1 or 3 channels (model.in_channels), got " +
                    std::to_string(o.channels));
  }
  if (o.mean.size() != static_cast<size_t>(o.channels) ||
      o.std.size() != static_cast<size_t>(o.channels)) {
    throw DataError("data.mean / data.std need one value per channel (" +
                    std::to_string(o.channels) + "), got " + std::to_string(o.mean.size()) +
                    " / " + std::to_string(o.std.size()));
  }
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(std::string root, std::string split, TransformOptions options)
      : root_(std::move(root)), split_(std::move(split)), options_(std::move(options)) {
    check_options(options_);
    data_ = read_idx(root_, split_);
  }

  size_t size() const override { return static_cast<size_t>(data_.count); }

  std::string describe() const override {
    return "idx " + root_ + " " + split_ + " (" + std::to_string(data_.count) + " images " +
           std::to_string(data_.rows) + "x" + std::to_string(data_.cols) + ", " +
           std::to_string(data_.num_classes) + " classes)";
  }

  int64_t num_classes() const override { return data_.num_classes; }
  std::vector<std::string> class_names() const override {
    std::vector<std::string> names;
    for (int c = 0; c < data_.num_classes; ++c) names.push_back("class_" + std::to_string(c));
    return names;
  }

  std::optional<Sample> get(size_t index, Rng& rng, bool train) const override {
    if (index >= size()) {
      throw DataError("sample index " + std::to_string(index) + " out of range for " +
                      describe());
    }
    const bool flip = train && options_.augment && uniform01(rng) < 0.5;
    Sample s;
    s.image = to_normalised_tensor(data_.image(static_cast<int64_t>(index)), data_.rows,
                                   data_.cols, 1, options_.channels, options_.mean, options_.std,
                                   flip);
    s.fields["label"] = label_tensor(data_.labels[index]);
    return s;
  }

 private:
  std::string root_, split_;
  TransformOptions options_;
  IdxData data_;
};

bool has_image_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(std::string root, std::string split, TransformOptions options)
      : root_(std::move(root)), split_(std::move(split)), options_(std::move(options)) {
    check_options(options_);
    scan();
  }

  size_t size() const override { return labels_.size(); }

  std::string describe() const override {
    return "imagefolder " + (fs::path(root_) / split_).string() + " (" +
           std::to_string(labels_.size()) + " images, " + std::to_string(classes_.size()) +
           " classes)";
  }

  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }

  std::string path(size_t index) const {
    const size_t begin = offsets_[index], end = offsets_[index + 1];
    return (split_dir_ / classes_[labels_[index]] / names_.substr(begin, end - begin)).string();
  }

  std::optional<Sample> get(size_t index, Rng& rng, bool train) const override {
    if (index >= size()) {
      throw DataError("sample index " + std::to_string(index) + " out of range for " +
                      describe());
    }
    const std::string file = path(index);
    try {
      std::vector<uint8_t> bytes;
      std::string error;
      if (!read_file_bytes(file, &bytes, &error)) return skip(file, error);
      std::optional<Image> image =
          decode_image(bytes.data(), bytes.size(), options_.channels, &error, options_.max_pixels);
      if (!image) return skip(file, error);
      const Image out = train && options_.augment
                            ? imagefolder_train_transform(*image, options_, rng)
                            : imagefolder_eval_transform(*image, options_);
      Sample s;
      s.image = to_normalised_tensor(out.pixels.data(), out.height, out.width, out.channels,
                                     options_.channels, options_.mean, options_.std, false);
      s.fields["label"] = label_tensor(labels_[index]);
      return s;
    } catch (const ImageTooLarge& e) {
      // A bomb is not a broken file to skip: the run would "succeed" without it, and the user
      // must either remove it or raise the bound (docs/DATA.md).
      throw DataError(file + ": " + e.what());
    } catch (const std::exception& e) {
      // A broken file must not stop a training run: skip it (the loader counts it).
      return skip(file, e.what());
    }
  }

 private:
  std::optional<Sample> skip(const std::string& file, const std::string& why) const {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(warned_mutex_);
      first = warned_.insert(file).second;
    }
    if (first) log::warn("skipping unreadable image " + file + ": " + why);
    return std::nullopt;
  }

  std::string layout() const {
    return "expected the ImageFolder layout " + root_ + "/" + split_ +
           "/<class>/<image>.JPEG|jpg|png (for Fashion-MNIST create one with `amptune data " +
           "export-imagefolder`)";
  }

  void scan() {
    std::error_code ec;
    if (!fs::is_directory(root_, ec)) {
      throw DataError("data.root " + root_ + " is not a directory; " + layout());
    }
    split_dir_ = fs::path(root_) / split_;
    if (!fs::is_directory(split_dir_, ec)) {
      throw DataError("split folder " + split_dir_.string() + " does not exist; " + layout());
    }
    for (const fs::directory_entry& e : fs::directory_iterator(split_dir_, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && e.is_directory(ec)) classes_.push_back(name);
    }
    if (ec) throw DataError("cannot list " + split_dir_.string() + ": " + ec.message());
    if (classes_.empty()) {
      throw DataError("no class folders in " + split_dir_.string() + "; " + layout());
    }
    std::sort(classes_.begin(), classes_.end());
    offsets_.push_back(0);
    std::vector<std::string> empty;
    for (size_t c = 0; c < classes_.size(); ++c) {
      const fs::path dir = split_dir_ / classes_[c];
      std::vector<std::string> files;
      auto it = fs::recursive_directory_iterator(
          dir, fs::directory_options::follow_directory_symlink, ec);
      for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file(ec) && has_image_extension(it->path())) {
          files.push_back(it->path().lexically_relative(dir).string());
        }
      }
      if (ec) throw DataError("cannot list " + dir.string() + ": " + ec.message());
      if (files.empty()) empty.push_back(classes_[c]);
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) {
        names_ += f;
        offsets_.push_back(names_.size());
        labels_.push_back(static_cast<int32_t>(c));
      }
    }
    if (!empty.empty()) {
      std::string list;
      for (size_t i = 0; i < empty.size() && i < 5; ++i) list += (i ? ", " : "") + empty[i];
      if (empty.size() > 5) list += ", ...";
      throw DataError(std::to_string(empty.size()) + " class folder(s) of " +
                      split_dir_.string() + " hold no .jpg/.jpeg/.png file: " + list +
                      "; remove them or add images (class indices come from the folder list)");
    }
  }

  std::string root_, split_;
  TransformOptions options_;
  fs::path split_dir_;
  std::vector<std::string> classes_;
  std::string names_;             // relative file names, concatenated (ImageNet: 1.28M files)
  std::vector<size_t> offsets_;   // names_ offsets, size() + 1 entries
  std::vector<int32_t> labels_;
  mutable std::mutex warned_mutex_;
  mutable std::set<std::string> warned_;
};

}  // namespace

Rng sample_rng(uint64_t seed, uint64_t epoch, uint64_t index) {
  // Each input passes through a full splitmix64 round, so neighbouring (seed, epoch, index)
  // triples give unrelated generator seeds.
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ epoch);
  h = splitmix64(h ^ index);
  return Rng(h);
}

std::shared_ptr<Dataset> make_idx_dataset(const std::string& root, const std::string& split,
                                          const TransformOptions& options) {
  return std::make_shared<IdxDataset>(root, split, options);
}

std::shared_ptr<Dataset> make_imagefolder_dataset(const std::string& root,
                                                  const std::string& split,
                                                  const TransformOptions& options) {
  return std::make_shared<ImageFolderDataset>(root, split, options);
}

std::shared_ptr<Dataset> make_dataset(const DataSettings& data, const RootNetSettings& rootnet,
                                      const ModelSettings& model, Split split) {
  const std::string& name = split == Split::kTrain ? data.train_split : data.val_split;
  if (data.format == DataFormat::kTensors) return make_tensors_dataset(data.root, name);
  if (data.format == DataFormat::kSynthetic) {
    return std::make_shared<SyntheticDataset>(model.in_channels, data.image_size,
                                              model.num_classes, data.synthetic_samples, split);
  }
  // tensors and synthetic: none
  const TransformOptions options = transform_options(data, model.in_channels);
  switch (data.format) {
    case DataFormat::kIdx:
      return make_idx_dataset(data.root, name, options);
    case DataFormat::kImageFolder:
      return make_imagefolder_dataset(data.root, name, options);
    case DataFormat::kRootNet:
      return make_rootnet_dataset(data, rootnet, split);
    case DataFormat::kTensors:
    case DataFormat::kSynthetic:
      break;  // above
  }
  throw std::logic_error("data.format " + to_string(data.format) + " has no data set");
}

}  // namespace amptune::data
