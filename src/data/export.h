// `amptune data export-imagefolder`: writes MNIST-style IDX splits as an ImageNet-style
// ImageFolder tree of JPEG files, so the imagefolder path can be run on real images.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace amptune::data {

enum class ClassNaming {
  kAuto,     // Fashion-MNIST names when there are 10 classes and idx_root's path names
             // "fashion" (any case), else class_0, class_1, ...
  kFashion,  // always the Fashion-MNIST names (needs exactly 10 classes)
  kGeneric,  // class_0, class_1, ...
};

// The Fashion-MNIST class names as folder names, index 0..9.
const std::vector<std::string>& fashion_mnist_class_names();

struct ExportStats {
  std::map<std::string, int64_t> images;  // per output split
  int64_t bytes = 0;                      // JPEG bytes written in all
  std::vector<std::string> class_names;   // folder name of class index i
  std::string out_dir;
};

// Reads IDX_ROOT/<in>-{images-idx3,labels-idx1}-ubyte[.gz] for each (in -> out) of `splits` and
// writes OUT_DIR/<out>/<class_name>/<index>.JPEG (index = position in the IDX file, zero-padded
// to at least 5 digits so names sort in file order), grey JPEGs of the given quality (1..100).
// limit_per_split < 0 exports everything; otherwise at most that many images per split, taken
// in file order with at most ceil(limit / classes) per class, so every class folder gets images
// (limit must be >= the number of classes). Each split is written into a temporary folder
// OUT_DIR/.<out>.tmp and renamed to OUT_DIR/<out> when complete: an interrupted export leaves
// no partial split. Throws DataError when an IDX file is missing or malformed, when
// OUT_DIR/<out> already exists (nothing is written then), or on write errors.
ExportStats export_idx_as_imagefolder(
    const std::string& idx_root, const std::string& out_dir,
    const std::map<std::string, std::string>& splits = {{"train", "train"}, {"t10k", "val"}},
    int64_t limit_per_split = -1, int jpeg_quality = 95, ClassNaming naming = ClassNaming::kAuto);

}  // namespace amptune::data
