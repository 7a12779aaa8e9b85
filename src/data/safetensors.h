// The safetensors layout (https://huggingface.co/docs/safetensors), which checkpoints
// (train/checkpoint.h) and the shards of data.format tensors (data/dataset.h) use: data only, so
// reading a file runs no code.
//
//   [8 bytes: N, little-endian uint64] [N bytes: JSON header] [data area: raw tensor bytes]
//   header: {"__metadata__": {"format": "...", ...},          (string -> string, optional)
//            "model.fc.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}, ...}
//
// Offsets are relative to the data area; tensors are C-contiguous, little-endian. Every violation
// of the layout is an error of the reader's Source (CheckpointError or DataError) that starts
// with the `origin` given (a file name); the messages are the same for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace amptune::data::safetensors {

// Bounds of a header (docs/SECURITY.md "Checkpoints" gives the reasons): its length in bytes,
// the tensors it describes, the dimensions of one tensor's shape.
constexpr uint64_t kMaxHeaderBytes = 16'000'000;
constexpr size_t kMaxEntries = 10'000;
constexpr size_t kMaxRank = 16;

// Who reads a file: a checkpoint's loader (violations are CheckpointErrors, exit 6) or a data
// set's (DataErrors, exit 4).
enum class Source { kCheckpoint, kData };

// What View throws when a stop is requested (core/process.h) while it reads a checkpoint's
// header: a signal is not damage. train turns it into RunStopped (train/phases.h).
class Stopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Entry {
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // [begin, end) in the data area
};

// The writer makes checkpoints (and a test's data shards), so its errors are CheckpointErrors.
// "F32" for torch::kFloat, ...; throws CheckpointError for a dtype the format cannot hold.
std::string dtype_name(torch::ScalarType dtype);
// For messages: a shape as "[3, 4]"; text of a file in quotes, clipped (log::kQuotedBytes).
std::string shape_text(const std::vector<int64_t>& shape);
std::string in_quotes(std::string_view text);

// The file's bytes for `tensors` (any device; copied to contiguous CPU memory) and `metadata`.
// Tensors are laid out by element size, largest first, so each starts aligned to its element
// size; the header is padded with spaces to a multiple of 8. Equal inputs give equal bytes.
// Throws CheckpointError for a repeated name, "__metadata__" as a name, or an unsupported dtype.
std::string serialize(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata);

// A validated header over bytes the caller keeps alive. The constructor checks everything that
// does not depend on what the reader expects: the header length (at most kMaxHeaderBytes and the
// bytes present), a JSON object with no repeated key, at most kMaxEntries tensors, known dtypes,
// shapes of at most kMaxRank non-negative dimensions whose element count times element size
// equals end - begin (no overflow), offsets inside the data area, tensors neither overlapping nor
// leaving gaps and covering the data area exactly, __metadata__ an object of strings. Time and
// memory are linear in the header; text of the file quoted in an error is clipped
// (log::clipped). For Source::kCheckpoint it polls for a stop (core/process.h) at every tensor
// and throws Stopped when one is requested; a data shard's header is read whole (a data set is
// opened before the training loop, which answers the stop at its first step).
class View {
 public:
  View(std::string_view bytes, const std::string& origin, Source source);

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A new CPU tensor with a copy of entry `name`'s bytes (a BOOL tensor must hold 0 or 1).
  torch::Tensor copy(const std::string& name) const;
  // Entry `name`'s bytes, inside the bytes the view was made over.
  std::string_view bytes(const std::string& name) const;

 private:
  std::string origin_;
  Source source_;
  std::string_view data_;  // the data area
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A whole file mapped read-only (empty files are not mapped); its pages are read from the file
// as they are touched and belong to the page cache. Throws the Source's error ("<origin> is
// missing or unreadable: <reason>").
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& origin, Source source);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace amptune::data::safetensors
