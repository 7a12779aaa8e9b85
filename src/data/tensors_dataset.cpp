// data.format tensors: a split of safetensors shards read row by row (data/dataset.h
// make_tensors_dataset states the layout, the checks and what is kept in memory).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include <torch/torch.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/safetensors.h"

namespace amptune::data {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;

std::string layout(const std::string& root, const std::string& split) {
  return "expected the tensors layout " + root + "/" + split +
         "/*.safetensors (docs/DATA.md \"Tensors\")";
}

using st::in_quotes;
using st::shape_text;

// A named tensor as every shard holds it: its dtype and the shape of one row (one sample).
struct Column {
  std::string name;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> row_shape;
  size_t row_bytes = 0;
};

// The column tensor `name` of shard `path` makes; DataError for a tensor of no dimension (no
// sample dimension) or whose rows hold no element (rows that cost nothing could be counted in
// the billions by a small file).
Column column_of(const std::string& name, const st::Entry& e, const std::string& path) {
  if (e.shape.empty()) {
    throw DataError(path + ": tensor " + in_quotes(name) +
                    " has no dimension (a scalar); the first dimension counts the samples "
                    "(store one value per sample as shape [N])");
  }
  Column c{name, e.dtype, std::vector<int64_t>(e.shape.begin() + 1, e.shape.end()), 0};
  size_t elements = 1;
  for (const int64_t d : c.row_shape) elements *= static_cast<size_t>(d);  // the reader checked
  if (elements == 0) {
    throw DataError(path + ": tensor " + in_quotes(name) + " of shape " + shape_text(e.shape) +
                    " has rows that hold no element");
  }
  c.row_bytes = elements * c10::elementSize(e.dtype);
  return c;
}

// One mapped shard: its rows [first, first + rows) of the split, where each column's rows start.
struct Shard {
  std::string path;
  std::unique_ptr<st::MappedFile> file;
  int64_t first = 0, rows = 0;
  std::vector<const char*> starts;  // parallel to the columns
};

class TensorsDataset : public Dataset {
 public:
  TensorsDataset(const std::string& root, const std::string& split)
      : dir_((fs::path(root) / split).string()) {
    for (const std::string& path : tensors_shard_files(root, split)) open(path);
    if (size_ == 0) {
      throw DataError(dir_ + " holds no sample: every tensor of its " +
                      std::to_string(shards_.size()) + " shard(s) has a first dimension of 0; " +
                      layout(root, split));
    }
  }

  size_t size() const override { return static_cast<size_t>(size_); }

  std::string describe() const override {
    std::string list;
    for (size_t i = 0; i < columns_.size() && i < 8; ++i) {
      const Column& c = columns_[i];
      list +=
          (i ? ", " : "") + c.name + " " + st::dtype_name(c.dtype) + " " + shape_text(c.row_shape);
    }
    if (columns_.size() > 8) list += ", ...";
    return "tensors " + dir_ + " (" + std::to_string(size_) + " samples in " +
           std::to_string(shards_.size()) + " shard(s): " + list + ")";
  }

  std::optional<Sample> get(size_t index, Rng&, bool) const override {
    if (index >= size()) {
      throw DataError("sample index " + std::to_string(index) + " out of range for " + describe());
    }
    const int64_t i = static_cast<int64_t>(index);
    // The last shard that starts at or before i (shards of no rows start where the next does).
    const Shard& shard =
        *(std::upper_bound(shards_.begin(), shards_.end(), i,
                           [](int64_t at, const Shard& s) { return at < s.first; }) -
          1);
    const auto row = static_cast<size_t>(i - shard.first);
    Sample sample;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const Column& column = columns_[c];
      const char* src = shard.starts[c] + row * column.row_bytes;
      if (column.dtype == torch::kBool &&
          std::any_of(src, src + column.row_bytes, [](char b) { return b != 0 && b != 1; })) {
        throw DataError(shard.path + ": tensor " + in_quotes(column.name) + " row " +
                        std::to_string(row) + " holds a BOOL that is neither 0 nor 1");
      }
      torch::Tensor t = torch::empty(column.row_shape, torch::TensorOptions().dtype(column.dtype));
      std::memcpy(t.data_ptr(), src, column.row_bytes);
      sample.fields.emplace(column.name, std::move(t));
    }
    return sample;
  }

 private:
  // Maps and checks shard `path` and appends it.
  void open(const std::string& path) {
    Shard shard;
    shard.path = path;
    shard.file = std::make_unique<st::MappedFile>(path, path, st::Source::kData);
    const st::View view(shard.file->bytes(), path, st::Source::kData);
    if (view.entries().empty()) throw DataError(path + " holds no tensor");
    if (shards_.empty()) {
      for (const auto& [name, e] : view.entries()) columns_.push_back(column_of(name, e, path));
    } else {
      check_like_first(view, path);
    }
    shard.rows = rows_of(view, path);
    shard.first = size_;
    size_ += shard.rows;  // no overflow: every row holds at least a byte of a file
    for (const Column& c : columns_) shard.starts.push_back(view.bytes(c.name).data());
    shards_.push_back(std::move(shard));
  }

  // The first dimension all tensors of shard `path` share.
  static int64_t rows_of(const st::View& view, const std::string& path) {
    const auto& [first_name, first] = *view.entries().begin();
    for (const auto& [name, e] : view.entries()) {
      if (e.shape[0] != first.shape[0]) {
        throw DataError(path + ": tensor " + in_quotes(name) + " has " + std::to_string(e.shape[0]) +
                        " rows (first dimension), tensor " + in_quotes(first_name) + " " +
                        std::to_string(first.shape[0]) +
                        "; every tensor of a shard holds one row per sample");
      }
    }
    return first.shape[0];
  }

  // Shard `path` holds the first shard's names, dtypes and row shapes.
  void check_like_first(const st::View& view, const std::string& path) const {
    const std::string& first = shards_.front().path;
    const auto& entries = view.entries();
    for (const auto& [name, e] : entries) {
      const auto same =
          std::lower_bound(columns_.begin(), columns_.end(), name,
                           [](const Column& c, const std::string& n) { return c.name < n; });
      if (same == columns_.end() || same->name != name) {
        throw DataError(path + " holds tensor " + in_quotes(name) + ", which the first shard " +
                        first + " does not; every shard holds the same tensors");
      }
      const Column c = column_of(name, e, path);
      if (c.dtype != same->dtype) {
        throw DataError(path + ": tensor " + in_quotes(name) + " is " + st::dtype_name(c.dtype) +
                        ", in the first shard " + first + " " + st::dtype_name(same->dtype));
      }
      if (c.row_shape != same->row_shape) {
        throw DataError(path + ": tensor " + in_quotes(name) + " has rows of shape " +
                        shape_text(c.row_shape) + ", in the first shard " + first + " " +
                        shape_text(same->row_shape) +
                        " (shards differ in the first dimension only)");
      }
    }
    for (const Column& c : columns_) {
      if (!entries.count(c.name)) {
        throw DataError(path + " lacks tensor " + in_quotes(c.name) + ", which the first shard " +
                        first + " holds; every shard holds the same tensors");
      }
    }
  }

  std::string dir_;
  std::vector<Column> columns_;  // in name order
  std::vector<Shard> shards_;
  int64_t size_ = 0;
};

}  // namespace

std::vector<std::string> tensors_shard_files(const std::string& root, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DataError("data.root " + root + " is not a directory; " + layout(root, split));
  }
  const fs::path dir = fs::path(root) / split;
  if (!fs::is_directory(dir, ec)) {
    throw DataError("split folder " + dir.string() + " does not exist; " + layout(root, split));
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code kind;  // a broken link is a shard too: opening it names it
    if (name[0] != '.' && e.path().extension() == ".safetensors" && !e.is_directory(kind)) {
      names.push_back(name);
    }
  }
  if (ec) throw DataError("cannot list " + dir.string() + ": " + ec.message());
  if (names.empty()) {
    throw DataError("no .safetensors file in " + dir.string() + "; " + layout(root, split));
  }
  if (names.size() > kMaxTensorShards) {
    throw DataError(dir.string() + " holds " + std::to_string(names.size()) +
                    " .safetensors files, more than the " + std::to_string(kMaxTensorShards) +
                    " a split may have (each stays mapped while the data are read); write "
                    "fewer, larger shards");
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((dir / name).string());
  return paths;
}

std::shared_ptr<Dataset> make_tensors_dataset(const std::string& root, const std::string& split) {
  return std::make_shared<TensorsDataset>(root, split);
}

}  // namespace amptune::data
