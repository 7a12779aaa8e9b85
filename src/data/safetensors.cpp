#include "data/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/error.h"
#include "core/log.h"
#include "core/process.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian; tensors are written as they are in memory");

namespace amptune::data::safetensors {
namespace {

// A violation of the layout inside the reader; typed at its edge by the reader's Source
// (typed_errors), so the checks are written once for checkpoints and data shards.
class LayoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(Source source, const std::string& what) {
  if (source == Source::kData) throw DataError(what);
  throw CheckpointError(what);
}

// fn(), with a LayoutError turned into the error of `source`.
template <typename Fn>
void typed_errors(Source source, Fn fn) {
  try {
    fn();
  } catch (const LayoutError& e) {
    fail(source, e.what());
  }
}

struct DtypeName {
  torch::ScalarType dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {torch::kDouble, "F64"},    {torch::kFloat, "F32"}, {torch::kHalf, "F16"},
    {torch::kBFloat16, "BF16"}, {torch::kLong, "I64"},  {torch::kInt, "I32"},
    {torch::kShort, "I16"},     {torch::kChar, "I8"},   {torch::kByte, "U8"},
    {torch::kBool, "BOOL"},
};


// The header read from nlohmann's SAX events straight into entries and metadata: each event
// costs O(log entries) and nothing is built that View does not keep. (The DOM parser with a
// callback, used before, scans the whole parent object at the end of every object it keeps:
// quadratic in the entries, 39 s and more for 80,000 of them.) Every bound is checked at the event
// that crosses it: a name repeated, the kMaxEntries+1-th tensor, the kMaxRank+1-th dimension, a
// value of the wrong kind (so nothing nests deeper than the format). A checkpoint's reader polls
// for a stop (core/process.h) at every tensor.
class HeaderReader {
 public:
  using json = nlohmann::json;
  HeaderReader(const std::string& origin, Source source, std::map<std::string, Entry>& entries,
               std::map<std::string, std::string>& metadata)
      : origin_(origin), source_(source), entries_(entries), metadata_(metadata) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }  // negative
  bool number_unsigned(json::number_unsigned_t v);
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t& text);
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t);
  bool key(json::string_t& name);
  bool end_object();
  bool start_array(std::size_t);
  bool end_array();
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // e.what() ends with the token read so far, which can be most of the header.
    throw LayoutError(origin_ + ": header is not valid JSON (" +
                      log::clipped(e.what(), log::kQuotedBytes) + ")");
  }

 private:
  enum class At { kStart, kHeader, kEntry, kShape, kOffsets, kMetadata, kEnd };
  enum class Field { kNone, kDtype, kShape, kOffsets };

  LayoutError bad(const std::string& why) const {
    return LayoutError(origin_ + ": tensor " + in_quotes(name_) + " " + why);
  }
  LayoutError twice(const std::string& name) const {
    return LayoutError(origin_ + ": header names " + in_quotes(name) + " twice");
  }
  bool value();  // any value that is not a structure, or one where it does not belong
  void end_entry();

  const std::string& origin_;
  Source source_;
  std::map<std::string, Entry>& entries_;
  std::map<std::string, std::string>& metadata_;
  At at_ = At::kStart;
  Field field_ = Field::kNone;
  bool metadata_seen_ = false;
  std::string name_;  // the tensor being read, or the __metadata__ key
  Entry entry_;
  bool has_dtype_ = false, has_shape_ = false;
  std::vector<uint64_t> offsets_;
  std::string dtype_;
};

constexpr const char* kNoOffsets = "has no data_offsets [begin, end] of non-negative integers";
constexpr const char* kBadDim = "has a shape entry that is not a non-negative integer";

bool HeaderReader::value() {
  switch (at_) {
    case At::kStart:
      throw LayoutError(origin_ + ": header is not a JSON object");
    case At::kHeader:
      if (name_ == "__metadata__") {
        throw LayoutError(origin_ + ": __metadata__ is not an object");
      }
      throw bad("is not described by an object");
    case At::kEntry:
      throw bad(field_ == Field::kDtype   ? "has no dtype"
                : field_ == Field::kShape ? "has no shape"
                                          : kNoOffsets);
    case At::kShape:
      throw bad(kBadDim);
    case At::kOffsets:
      throw bad(kNoOffsets);
    case At::kMetadata:
      throw LayoutError(origin_ + ": __metadata__." + log::clipped(name_, log::kQuotedBytes) +
                        " is not a string");
    case At::kEnd:
      break;
  }
  throw LayoutError(origin_ + ": header has content after its end");
}

bool HeaderReader::number_unsigned(json::number_unsigned_t v) {
  if (at_ == At::kShape) {
    if (v > uint64_t(INT64_MAX)) throw bad(kBadDim);
    if (entry_.shape.size() == kMaxRank) {
      throw bad("has more than " + std::to_string(kMaxRank) + " dimensions");
    }
    entry_.shape.push_back(static_cast<int64_t>(v));
    return true;
  }
  if (at_ == At::kOffsets && v <= uint64_t(INT64_MAX) && offsets_.size() < 2) {
    offsets_.push_back(v);
    return true;
  }
  return value();
}

bool HeaderReader::string(json::string_t& text) {
  if (at_ == At::kMetadata) {
    metadata_.emplace(name_, std::move(text));
    return true;
  }
  if (at_ != At::kEntry || field_ != Field::kDtype) return value();
  const auto* known = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const DtypeName& d) { return text == d.name; });
  if (known == std::end(kDtypes)) throw bad("has unknown dtype " + in_quotes(text));
  entry_.dtype = known->dtype;
  dtype_ = text;
  has_dtype_ = true;
  return true;
}

bool HeaderReader::start_object(std::size_t) {
  if (at_ == At::kStart) {
    at_ = At::kHeader;
  } else if (at_ == At::kHeader && name_ == "__metadata__") {
    at_ = At::kMetadata;
  } else if (at_ == At::kHeader) {
    at_ = At::kEntry;
    entry_ = Entry{};
    has_dtype_ = has_shape_ = false;
    offsets_.clear();
  } else {
    return value();
  }
  return true;
}

bool HeaderReader::key(json::string_t& name) {
  if (at_ == At::kMetadata) {
    if (metadata_.count(name)) throw twice(name);
    name_ = std::move(name);
    return true;
  }
  if (at_ == At::kEntry) {
    const bool seen = (name == "dtype" && has_dtype_) || (name == "shape" && has_shape_) ||
                      (name == "data_offsets" && !offsets_.empty());
    if (seen) throw twice(name);
    field_ = name == "dtype"          ? Field::kDtype
             : name == "shape"        ? Field::kShape
             : name == "data_offsets" ? Field::kOffsets
                                      : Field::kNone;
    if (field_ == Field::kNone) throw bad("has an unknown field " + in_quotes(name));
    return true;
  }
  // At::kHeader: a tensor's name or __metadata__.
  if (source_ == Source::kCheckpoint && stop_requested()) {
    throw Stopped("stopped while reading the header of " + origin_);
  }
  if (name == "__metadata__" ? std::exchange(metadata_seen_, true) : entries_.count(name) > 0) {
    throw twice(name);
  }
  if (name != "__metadata__" && entries_.size() == kMaxEntries) {
    throw LayoutError(origin_ + ": header describes more than " + std::to_string(kMaxEntries) +
                      " tensors, the most a " +
                      (source_ == Source::kCheckpoint ? "checkpoint" : "data shard") + " may hold");
  }
  name_ = std::move(name);
  return true;
}

bool HeaderReader::start_array(std::size_t) {
  if (at_ != At::kEntry || field_ == Field::kDtype) return value();
  at_ = field_ == Field::kShape ? At::kShape : At::kOffsets;
  has_shape_ = has_shape_ || field_ == Field::kShape;
  return true;
}

bool HeaderReader::end_array() {
  if (at_ == At::kOffsets && offsets_.size() != 2) throw bad(kNoOffsets);
  if (at_ == At::kOffsets && offsets_[1] < offsets_[0]) throw bad("ends before it begins");
  at_ = At::kEntry;
  return true;
}

bool HeaderReader::end_object() {
  if (at_ == At::kEntry) end_entry();
  at_ = at_ == At::kHeader ? At::kEnd : At::kHeader;
  name_.clear();
  return true;
}

// The element count times the element size must be the offsets' span, without overflow.
void HeaderReader::end_entry() {
  if (!has_dtype_) throw bad("has no dtype");
  if (!has_shape_) throw bad("has no shape");
  if (offsets_.size() != 2) throw bad(kNoOffsets);
  entry_.begin = offsets_[0];
  entry_.end = offsets_[1];
  uint64_t count = 1;
  bool overflow = false;
  for (const int64_t d : entry_.shape) {
    overflow = __builtin_mul_overflow(count, uint64_t(d), &count) || overflow;
  }
  uint64_t bytes = 0;
  overflow = __builtin_mul_overflow(count, c10::elementSize(entry_.dtype), &bytes) || overflow;
  if (overflow || bytes != entry_.end - entry_.begin) {
    throw bad("of shape " + shape_text(entry_.shape) + " and dtype " + dtype_ + " needs " +
              (overflow ? "more than 2^64" : std::to_string(bytes)) + " bytes, its offsets span " +
              std::to_string(entry_.end - entry_.begin));
  }
  entries_.emplace(std::move(name_), std::move(entry_));
}

// Tensors in offset order must tile the data area: no overlap, no gap, nothing past the end.
void check_layout(const std::map<std::string, Entry>& entries, uint64_t data_size,
                  const std::string& origin) {
  std::vector<std::pair<const std::string*, const Entry*>> order;
  for (const auto& [name, e] : entries) {
    if (e.end > data_size) {
      throw LayoutError(origin + ": tensor " + in_quotes(name) + " ends at byte " +
                        std::to_string(e.end) + ", past the end of the data (" +
                        std::to_string(data_size) + " bytes; truncated?)");
    }
    order.emplace_back(&name, &e);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  uint64_t next = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < next) {
      throw LayoutError(origin + ": tensors " + in_quotes(*previous) + " and " + in_quotes(*name) +
                        " overlap");
    }
    if (e->begin > next) {
      throw LayoutError(origin + ": bytes " + std::to_string(next) + " to " +
                        std::to_string(e->begin) + " of the data belong to no tensor");
    }
    next = e->end;
    previous = name;
  }
  if (next != data_size) {
    throw LayoutError(origin + ": the data has " + std::to_string(data_size) +
                      " bytes, the tensors cover " + std::to_string(next));
  }
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string in_quotes(std::string_view text) {
  return "\"" + log::clipped(text, log::kQuotedBytes) + "\"";
}

std::string dtype_name(torch::ScalarType dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  throw CheckpointError(std::string("a checkpoint cannot hold tensors of dtype ") +
                        c10::toString(dtype));
}

std::string serialize(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, torch::Tensor>> cpu;
  std::set<std::string> names{"__metadata__"};
  for (const auto& [name, t] : tensors) {
    if (!names.insert(name).second) throw CheckpointError("tensor name " + name + " repeated");
    cpu.emplace_back(name, t.detach().to(torch::kCPU).contiguous());
  }
  std::stable_sort(cpu.begin(), cpu.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() > b.second.element_size();
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : cpu) {
    const uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  out.reserve(8 + json.size() + offset);
  out += json;
  for (const auto& [name, t] : cpu) {
    out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return out;
}

View::View(std::string_view bytes, const std::string& origin, Source source)
    : origin_(origin), source_(source) {
  typed_errors(source, [&] {
    if (bytes.size() < 8) {
      throw LayoutError(origin + ": " + std::to_string(bytes.size()) +
                        " bytes, too short for a safetensors header (truncated?)");
    }
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    if (n > kMaxHeaderBytes || n > bytes.size() - 8) {
      throw LayoutError(origin + ": header length " + std::to_string(n) + " exceeds " +
                        (n > kMaxHeaderBytes ? "the limit of " + std::to_string(kMaxHeaderBytes)
                                             : "the " + std::to_string(bytes.size() - 8) +
                                                   " bytes that follow (truncated?)"));
    }
    const std::string_view text = bytes.substr(8, n);
    HeaderReader reader(origin_, source_, entries_, metadata_);
    nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
    data_ = bytes.substr(8 + n);
    check_layout(entries_, data_.size(), origin);
  });
}

std::string_view View::bytes(const std::string& name) const {
  const Entry& e = entries_.at(name);
  return data_.substr(e.begin, e.end - e.begin);
}

torch::Tensor View::copy(const std::string& name) const {
  const Entry& e = entries_.at(name);
  torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  const char* src = data_.data() + e.begin;
  const size_t size = e.end - e.begin;
  if (e.dtype == torch::kBool &&
      std::any_of(src, src + size, [](char c) { return c != 0 && c != 1; })) {
    fail(source_, origin_ + ": tensor \"" + name + "\" holds a BOOL that is neither 0 nor 1");
  }
  if (size > 0) std::memcpy(t.data_ptr(), src, size);
  return t;
}

MappedFile::MappedFile(const std::string& path, const std::string& origin, Source source) {
  const std::string unreadable = origin + " is missing or unreadable: ";
  // O_NONBLOCK: a FIFO in a file's place must not hang the open (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int saved = errno;
    if (fd >= 0) ::close(fd);
    fail(source, unreadable + std::strerror(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(source, unreadable + "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int saved = errno;
      data_ = nullptr;
      ::close(fd);
      fail(source, unreadable + std::strerror(saved));
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace amptune::data::safetensors
