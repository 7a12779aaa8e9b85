#include "data/idx.h"

#include <algorithm>
#include <filesystem>

#include <zlib.h>

#include "core/error.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string expected_layout(const std::string& root, const std::string& split) {
  return "expected MNIST-style IDX files " + root + "/" + split + "-images-idx3-ubyte[.gz] and " +
         root + "/" + split + "-labels-idx1-ubyte[.gz] (check data.root and the split key " +
         "data.train_split / data.val_split; Fashion-MNIST uses 'train' and 't10k')";
}

}  // namespace

std::string find_idx_file(const std::string& root, const std::string& split,
                          const std::string& kind) {
  const std::string plain = (fs::path(root) / (split + "-" + kind + "-ubyte")).string();
  std::error_code ec;
  if (fs::is_regular_file(plain, ec)) return plain;
  const std::string gz = plain + ".gz";
  if (fs::is_regular_file(gz, ec)) return gz;
  throw DataError("IDX file not found: neither " + plain + " nor " + gz + " exists; " +
                  expected_layout(root, split));
}

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw DataError("cannot open " + path + " for reading");
  gzbuffer(file, 1 << 17);
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      std::string msg = gzerror(file, &errnum);
      gzclose(file);
      throw DataError("cannot read " + path + ": " + msg + " (corrupt gzip stream?)");
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  int errnum = Z_OK;
  std::string msg = gzerror(file, &errnum);
  gzclose(file);
  // zlib reports a gzip stream cut short as Z_BUF_ERROR after returning what it could inflate.
  if (errnum != Z_OK) {
    throw DataError("cannot read " + path + ": " + msg +
                    " (truncated or corrupt gzip file; download it again)");
  }
  return bytes;
}

IdxData read_idx(const std::string& root, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DataError("data.root " + root + " is not a directory; " + expected_layout(root, split));
  }
  IdxData d;
  d.images_path = find_idx_file(root, split, "images-idx3");
  d.labels_path = find_idx_file(root, split, "labels-idx1");

  std::vector<uint8_t> img = read_maybe_gzip(d.images_path);
  if (img.size() < 16) {
    throw DataError(d.images_path + " is truncated: expected an IDX3 header of 16 bytes, got " +
                    std::to_string(img.size()) + " bytes");
  }
  if (be32(img.data()) != 2051) {
    throw DataError(d.images_path + ": bad magic number " + std::to_string(be32(img.data())) +
                    ", expected 2051 (IDX3 unsigned-byte images); is this an images file?");
  }
  const uint32_t n_img = be32(img.data() + 4);
  const uint32_t rows = be32(img.data() + 8), cols = be32(img.data() + 12);
  if (rows == 0 || cols == 0 || rows > 65536 || cols > 65536) {
    throw DataError(d.images_path + ": implausible image size " + std::to_string(rows) + "x" +
                    std::to_string(cols));
  }
  const uint64_t want = 16 + uint64_t{n_img} * rows * cols;
  if (img.size() != want) {
    throw DataError(d.images_path + (img.size() < want ? " is truncated" : " has trailing bytes") +
                    ": header says " + std::to_string(n_img) + " images of " +
                    std::to_string(rows) + "x" + std::to_string(cols) + " = " +
                    std::to_string(want) + " bytes, the file has " + std::to_string(img.size()));
  }

  std::vector<uint8_t> lab = read_maybe_gzip(d.labels_path);
  if (lab.size() < 8) {
    throw DataError(d.labels_path + " is truncated: expected an IDX1 header of 8 bytes, got " +
                    std::to_string(lab.size()) + " bytes");
  }
  if (be32(lab.data()) != 2049) {
    throw DataError(d.labels_path + ": bad magic number " + std::to_string(be32(lab.data())) +
                    ", expected 2049 (IDX1 unsigned-byte labels); is this a labels file?");
  }
  const uint32_t n_lab = be32(lab.data() + 4);
  if (lab.size() != 8 + uint64_t{n_lab}) {
    throw DataError(d.labels_path + (lab.size() < 8 + uint64_t{n_lab} ? " is truncated" :
                                                                          " has trailing bytes") +
                    ": header says " + std::to_string(n_lab) + " labels = " +
                    std::to_string(8 + uint64_t{n_lab}) + " bytes, the file has " +
                    std::to_string(lab.size()));
  }
  if (n_lab != n_img) {
    throw DataError("IDX split '" + split + "' in " + root + ": " + d.images_path + " holds " +
                    std::to_string(n_img) + " images but " + d.labels_path + " holds " +
                    std::to_string(n_lab) + " labels; they must match");
  }
  d.count = n_img;
  d.rows = static_cast<int>(rows);
  d.cols = static_cast<int>(cols);
  d.pixels.assign(img.begin() + 16, img.end());
  d.labels.assign(lab.begin() + 8, lab.end());
  d.num_classes = d.labels.empty() ? 0 : *std::max_element(d.labels.begin(), d.labels.end()) + 1;
  return d;
}

}  // namespace amptune::data
