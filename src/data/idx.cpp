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

namespace {

// deflate's largest ratio: a stream cannot inflate to more than 1032 times its size (zlib's
// technical details; the gzip members' headers only add to the compressed size).
constexpr uint64_t kMaxDeflateRatio = 1032;

// A file read through zlib (gzip inflated, a plain file as it is) into buffers of sizes the
// caller chose, so nothing is inflated past what the header declares.
class IdxFile {
 public:
  explicit IdxFile(std::string path) : path_(std::move(path)) {
    file_ = gzopen(path_.c_str(), "rb");
    if (!file_) throw DataError("cannot open " + path_ + " for reading");
    gzbuffer(file_, 1 << 17);
    std::error_code ec;
    file_bytes_ = fs::file_size(path_, ec);
    if (ec) file_bytes_ = 0;
  }
  ~IdxFile() { gzclose(file_); }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  const std::string& path() const { return path_; }

  // The most bytes the file can hold after its header: its size when plain, deflate's bound of
  // its compressed size when gzip.
  uint64_t capacity() const {
    return gzdirect(file_) ? file_bytes_ : file_bytes_ * kMaxDeflateRatio;
  }

  std::string capacity_text() const {
    return gzdirect(file_) ? "a plain file of " + std::to_string(file_bytes_) + " bytes"
                           : "a gzip file of " + std::to_string(file_bytes_) +
                                 " bytes (deflate inflates at most 1032:1)";
  }

  // Reads up to n bytes into out; returns how many (fewer only at the end of the data).
  size_t read(uint8_t* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(file_, out + got, want);
      if (r < 0) fail("corrupt gzip stream?");
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    // zlib reports a gzip stream cut short as Z_BUF_ERROR after returning what it could inflate.
    int errnum = Z_OK;
    const char* msg = gzerror(file_, &errnum);
    if (errnum != Z_OK) {
      throw DataError("cannot read " + path_ + ": " + msg +
                      " (truncated or corrupt gzip file; download it again)");
    }
    return got;
  }

  // True when the data goes on past what was read (one byte is read to know).
  bool more() {
    uint8_t byte = 0;
    return read(&byte, 1) == 1;
  }

 private:
  [[noreturn]] void fail(const std::string& hint) {
    int errnum = 0;
    const std::string msg = gzerror(file_, &errnum);
    throw DataError("cannot read " + path_ + ": " + msg + " (" + hint + ")");
  }

  std::string path_;
  gzFile file_ = nullptr;
  uint64_t file_bytes_ = 0;
};

// The data after a header, of exactly `want` bytes as the header declares: refused before
// anything is allocated when the file cannot hold that many, and read without inflating past
// them (a gzip bomb stops at the declared size plus one byte).
std::vector<uint8_t> read_declared(IdxFile& file, uint64_t header_bytes, uint64_t want,
                                   const std::string& declared) {
  if (want > file.capacity()) {
    throw DataError(file.path() + " is truncated: header says " + declared + " = " +
                    std::to_string(header_bytes + want) + " bytes, more than " +
                    file.capacity_text() + " can hold");
  }
  std::vector<uint8_t> data(static_cast<size_t>(want));
  const size_t got = file.read(data.data(), data.size());
  if (got < want) {
    throw DataError(file.path() + " is truncated: header says " + declared + " = " +
                    std::to_string(header_bytes + want) + " bytes, the file has " +
                    std::to_string(header_bytes + got));
  }
  if (file.more()) {
    throw DataError(file.path() + " has trailing bytes: header says " + declared + " = " +
                    std::to_string(header_bytes + want) +
                    " bytes, the file holds more (only the declared bytes were read)");
  }
  return data;
}

}  // namespace

IdxData read_idx(const std::string& root, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DataError("data.root " + root + " is not a directory; " + expected_layout(root, split));
  }
  IdxData d;
  d.images_path = find_idx_file(root, split, "images-idx3");
  d.labels_path = find_idx_file(root, split, "labels-idx1");

  IdxFile images(d.images_path);
  uint8_t head[16] = {};
  size_t got = images.read(head, 16);
  if (got < 16) {
    throw DataError(d.images_path + " is truncated: expected an IDX3 header of 16 bytes, got " +
                    std::to_string(got) + " bytes");
  }
  if (be32(head) != 2051) {
    throw DataError(d.images_path + ": bad magic number " + std::to_string(be32(head)) +
                    ", expected 2051 (IDX3 unsigned-byte images); is this an images file?");
  }
  const uint32_t n_img = be32(head + 4);
  const uint32_t rows = be32(head + 8), cols = be32(head + 12);
  if (rows == 0 || cols == 0 || rows > 65536 || cols > 65536) {
    throw DataError(d.images_path + ": implausible image size " + std::to_string(rows) + "x" +
                    std::to_string(cols));
  }
  d.pixels = read_declared(
      images, 16, uint64_t{n_img} * rows * cols,
      std::to_string(n_img) + " images of " + std::to_string(rows) + "x" + std::to_string(cols));

  IdxFile labels(d.labels_path);
  got = labels.read(head, 8);
  if (got < 8) {
    throw DataError(d.labels_path + " is truncated: expected an IDX1 header of 8 bytes, got " +
                    std::to_string(got) + " bytes");
  }
  if (be32(head) != 2049) {
    throw DataError(d.labels_path + ": bad magic number " + std::to_string(be32(head)) +
                    ", expected 2049 (IDX1 unsigned-byte labels); is this a labels file?");
  }
  const uint32_t n_lab = be32(head + 4);
  if (n_lab != n_img) {
    throw DataError("IDX split '" + split + "' in " + root + ": " + d.images_path + " holds " +
                    std::to_string(n_img) + " images but " + d.labels_path + " holds " +
                    std::to_string(n_lab) + " labels; they must match");
  }
  d.labels = read_declared(labels, 8, n_lab, std::to_string(n_lab) + " labels");
  d.count = n_img;
  d.rows = static_cast<int>(rows);
  d.cols = static_cast<int>(cols);
  d.num_classes = d.labels.empty() ? 0 : *std::max_element(d.labels.begin(), d.labels.end()) + 1;
  return d;
}

}  // namespace amptune::data
