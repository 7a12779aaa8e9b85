#include "data/export.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/idx.h"
#include "data/image.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;

bool mentions_fashion(const std::string& path) {
  std::string lower = fs::absolute(fs::path(path)).lexically_normal().string();
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("fashion") != std::string::npos;
}

std::vector<std::string> class_folder_names(const std::string& idx_root, int num_classes,
                                            ClassNaming naming) {
  const bool fashion =
      naming == ClassNaming::kFashion ||
      (naming == ClassNaming::kAuto && num_classes == 10 && mentions_fashion(idx_root));
  if (fashion) {
    if (num_classes != 10) {
      throw DataError("Fashion-MNIST class names need 10 classes, the IDX labels in " + idx_root +
                      " have " + std::to_string(num_classes));
    }
    return fashion_mnist_class_names();
  }
  std::vector<std::string> names;
  for (int c = 0; c < num_classes; ++c) names.push_back("class_" + std::to_string(c));
  return names;
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw DataError("cannot write " + path.string() + " (disk full or no permission?)");
}

// Refuses, before anything is read or written, an output split name that is not a plain folder
// name and one that exists already in `out_dir`.
void check_outputs(const std::string& out_dir, const std::map<std::string, std::string>& splits) {
  for (const auto& [in, out] : splits) {
    if (out.empty() || out.find('/') != std::string::npos || out[0] == '.') {
      throw DataError("export-imagefolder: bad output split name '" + out + "'");
    }
    std::error_code ec;
    if (fs::exists(fs::path(out_dir) / out, ec)) {
      throw DataError((fs::path(out_dir) / out).string() +
                      " exists already; remove it or choose another output folder");
    }
  }
}

// Writes the images of `d` (`split` names it for messages) as `dir`/<class name>/<index>.JPEG,
// in file order, at most ceil(limit / classes) per class when limit_per_split >= 0; adds their
// bytes to stats.bytes and returns how many. DataError when a class gets no image.
int64_t write_split(const IdxData& d, const std::string& split, const fs::path& dir,
                    int64_t limit_per_split, int jpeg_quality, ExportStats& stats) {
  const int num_classes = static_cast<int>(stats.class_names.size());
  for (const std::string& name : stats.class_names) fs::create_directories(dir / name);
  std::vector<int64_t> per_class(static_cast<size_t>(num_classes), 0);
  const int64_t cap =
      limit_per_split < 0 ? d.count : (limit_per_split + num_classes - 1) / num_classes;
  const int64_t limit = limit_per_split < 0 ? d.count : limit_per_split;
  const int width = std::max<int>(5, static_cast<int>(std::to_string(d.count).size()));
  int64_t written = 0;
  Image image;
  image.width = d.cols;
  image.height = d.rows;
  image.channels = 1;
  for (int64_t i = 0; i < d.count && written < limit; ++i) {
    const int label = d.labels[static_cast<size_t>(i)];
    if (per_class[label] >= cap) continue;
    image.pixels.assign(d.image(i), d.image(i) + static_cast<size_t>(d.rows) * d.cols);
    const std::vector<uint8_t> jpeg = encode_jpeg(image, jpeg_quality);
    std::string name = std::to_string(i);
    name = std::string(static_cast<size_t>(std::max<int>(0, width - static_cast<int>(name.size()))),
                       '0') +
           name + ".JPEG";
    write_file(dir / stats.class_names[label] / name, jpeg);
    ++per_class[label];
    ++written;
    stats.bytes += static_cast<int64_t>(jpeg.size());
  }
  for (int c = 0; c < num_classes; ++c) {
    if (per_class[c] == 0) {
      throw DataError("export-imagefolder: " + split + " has no image of class " +
                      std::to_string(c) + " (" + stats.class_names[c] +
                      "); an ImageFolder needs every class");
    }
  }
  return written;
}

}  // namespace

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> kNames = {"T-shirt_top", "Trouser", "Pullover", "Dress",
                                                  "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                  "Bag",         "Ankle_boot"};
  return kNames;
}

ExportStats export_idx_as_imagefolder(const std::string& idx_root, const std::string& out_dir,
                                      const std::map<std::string, std::string>& splits,
                                      int64_t limit_per_split, int jpeg_quality,
                                      ClassNaming naming) {
  if (jpeg_quality < 1 || jpeg_quality > 100) {
    throw DataError("JPEG quality must be in 1..100, got " + std::to_string(jpeg_quality));
  }
  if (splits.empty()) throw DataError("export-imagefolder: no splits to export");
  check_outputs(out_dir, splits);
  std::map<std::string, IdxData> data;
  int num_classes = 0;
  for (const auto& [in, out] : splits) {
    data.emplace(in, read_idx(idx_root, in));
    num_classes = std::max(num_classes, data.at(in).num_classes);
  }
  if (limit_per_split >= 0 && limit_per_split < num_classes) {
    throw DataError("export-imagefolder: a limit of " + std::to_string(limit_per_split) +
                    " images per split leaves class folders empty; use at least " +
                    std::to_string(num_classes) + " (the number of classes) or no limit");
  }
  ExportStats stats;
  stats.class_names = class_folder_names(idx_root, num_classes, naming);
  stats.out_dir = out_dir;

  for (const auto& [in, out] : splits) {
    const fs::path final_dir = fs::path(out_dir) / out;
    const fs::path tmp_dir = fs::path(out_dir) / ("." + out + ".tmp");
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);  // a previous interrupted export
    try {
      const int64_t written = write_split(data.at(in), "split '" + in + "' of " + idx_root, tmp_dir,
                                          limit_per_split, jpeg_quality, stats);
      fs::rename(tmp_dir, final_dir);
      stats.images[out] = written;
    } catch (const fs::filesystem_error& e) {
      fs::remove_all(tmp_dir, ec);
      throw DataError("export-imagefolder: cannot write " + final_dir.string() + ": " + e.what());
    } catch (...) {
      fs::remove_all(tmp_dir, ec);
      throw;
    }
  }
  return stats;
}

}  // namespace amptune::data
