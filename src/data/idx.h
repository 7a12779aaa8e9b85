// MNIST-style IDX files (MNIST, Fashion-MNIST): ROOT/SPLIT-images-idx3-ubyte[.gz] (magic 2051,
// big-endian count, rows, cols, then uint8 pixels) and ROOT/SPLIT-labels-idx1-ubyte[.gz]
// (magic 2049, count, then uint8 labels). Torch-free; gzip is read with zlib.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace amptune::data {

struct IdxData {
  std::string images_path;  // the files actually read
  std::string labels_path;
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major per image
  std::vector<uint8_t> labels;  // count
  int num_classes = 0;          // max label + 1

  const uint8_t* image(int64_t i) const {
    return pixels.data() + static_cast<size_t>(i) * rows * cols;
  }
};

// The path of ROOT/SPLIT-<kind>-ubyte, preferring the uncompressed file, else the .gz one.
// kind is "images-idx3" or "labels-idx1". Throws DataError naming both candidates when neither
// exists.
std::string find_idx_file(const std::string& root, const std::string& split,
                          const std::string& kind);

// Reads both files of a split completely (gzip or plain). Throws DataError naming the file and
// what was expected on a missing file, bad magic number, truncated data, trailing bytes or
// mismatched counts. Memory is bounded by what the headers declare: a header is read first, a
// declared size the file cannot hold (a plain file's size, deflate's 1032:1 bound of a gzip
// file's) is refused before anything is allocated, and nothing is inflated past the declared
// bytes plus one (a gzip bomb behind a small header costs the header's size).
IdxData read_idx(const std::string& root, const std::string& split);

}  // namespace amptune::data
