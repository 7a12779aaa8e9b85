#include "train/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian; tensors are written as they are in memory");

namespace amptune::train::safetensors {
namespace {

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

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Rejects repeated keys at any depth (nlohmann keeps the last one silently) and nesting deeper
// than any safetensors header needs (a header of 100 MB of '[' must not exhaust anything).
class KeyChecker {
 public:
  explicit KeyChecker(const std::string& origin) : origin_(origin) {}
  bool operator()(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > 4) {
      throw CheckpointError(origin_ + ": header nests deeper than a safetensors header");
    }
    if (event == E::object_start) keys_.emplace_back();
    if (event == E::object_end && !keys_.empty()) keys_.pop_back();
    if (event == E::key && !keys_.back().insert(parsed.get<std::string>()).second) {
      throw CheckpointError(origin_ + ": header names \"" + parsed.get<std::string>() + "\" twice");
    }
    return true;
  }

 private:
  const std::string& origin_;
  std::vector<std::set<std::string>> keys_;
};

// A non-negative integer that fits in int64 (a shape dimension or an offset).
bool non_negative_int(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(INT64_MAX);
  return v.is_number_integer() && v.get<int64_t>() >= 0;
}

Entry parse_entry(const std::string& name, const nlohmann::json& j, const std::string& origin) {
  auto bad = [&](const std::string& why) {
    return CheckpointError(origin + ": tensor \"" + name + "\" " + why);
  };
  if (!j.is_object()) throw bad("is not described by an object");
  for (const auto& field : j.items()) {
    const std::string& key = field.key();
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      throw bad("has an unknown field \"" + key + "\"");
    }
  }
  Entry e;
  if (!j.contains("dtype") || !j["dtype"].is_string()) throw bad("has no dtype");
  const std::string dtype = j["dtype"].get<std::string>();
  const auto* known = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const DtypeName& d) { return dtype == d.name; });
  if (known == std::end(kDtypes)) throw bad("has unknown dtype \"" + dtype + "\"");
  e.dtype = known->dtype;
  if (!j.contains("shape") || !j["shape"].is_array()) throw bad("has no shape");
  uint64_t count = 1;
  bool overflow = false;
  for (const auto& d : j["shape"]) {
    if (!non_negative_int(d)) throw bad("has a shape entry that is not a non-negative integer");
    e.shape.push_back(d.get<int64_t>());
    overflow = __builtin_mul_overflow(count, d.get<uint64_t>(), &count) || overflow;
  }
  const auto& off = j.contains("data_offsets") ? j["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !non_negative_int(off[0]) ||
      !non_negative_int(off[1])) {
    throw bad("has no data_offsets [begin, end] of non-negative integers");
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) throw bad("ends before it begins");
  uint64_t bytes = 0;
  overflow = __builtin_mul_overflow(count, c10::elementSize(e.dtype), &bytes) || overflow;
  if (overflow || bytes != e.end - e.begin) {
    throw bad("of shape " + shape_text(e.shape) + " and dtype " + dtype + " needs " +
              (overflow ? "more than 2^64" : std::to_string(bytes)) + " bytes, its offsets span " +
              std::to_string(e.end - e.begin));
  }
  return e;
}

// Tensors in offset order must tile the data area: no overlap, no gap, nothing past the end.
void check_layout(const std::map<std::string, Entry>& entries, uint64_t data_size,
                  const std::string& origin) {
  std::vector<std::pair<const std::string*, const Entry*>> order;
  for (const auto& [name, e] : entries) {
    if (e.end > data_size) {
      throw CheckpointError(origin + ": tensor \"" + name + "\" ends at byte " +
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
      throw CheckpointError(origin + ": tensors \"" + *previous + "\" and \"" + *name +
                            "\" overlap");
    }
    if (e->begin > next) {
      throw CheckpointError(origin + ": bytes " + std::to_string(next) + " to " +
                            std::to_string(e->begin) + " of the data belong to no tensor");
    }
    next = e->end;
    previous = name;
  }
  if (next != data_size) {
    throw CheckpointError(origin + ": the data has " + std::to_string(data_size) +
                          " bytes, the tensors cover " + std::to_string(next));
  }
}

}  // namespace

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

View::View(std::string_view bytes, const std::string& origin) : origin_(origin) {
  if (bytes.size() < 8) {
    throw CheckpointError(origin + ": " + std::to_string(bytes.size()) +
                          " bytes, too short for a safetensors header (truncated?)");
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) {
    throw CheckpointError(origin + ": header length " + std::to_string(n) + " exceeds " +
                          (n > kMaxHeaderBytes ? "the limit of " + std::to_string(kMaxHeaderBytes)
                                               : "the " + std::to_string(bytes.size() - 8) +
                                                     " bytes that follow (truncated?)"));
  }
  const std::string_view text = bytes.substr(8, n);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), KeyChecker(origin_));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(origin + ": header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw CheckpointError(origin + ": header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      entries_.emplace(name, parse_entry(name, value, origin));
      continue;
    }
    if (!value.is_object()) throw CheckpointError(origin + ": __metadata__ is not an object");
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string()) {
        throw CheckpointError(origin + ": __metadata__." + key + " is not a string");
      }
      metadata_.emplace(key, v.get<std::string>());
    }
  }
  data_ = bytes.substr(8 + n);
  check_layout(entries_, data_.size(), origin);
}

torch::Tensor View::copy(const std::string& name) const {
  const Entry& e = entries_.at(name);
  torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  const char* src = data_.data() + e.begin;
  const size_t size = e.end - e.begin;
  if (e.dtype == torch::kBool &&
      std::any_of(src, src + size, [](char c) { return c != 0 && c != 1; })) {
    throw CheckpointError(origin_ + ": tensor \"" + name +
                          "\" holds a BOOL that is neither 0 nor 1");
  }
  if (size > 0) std::memcpy(t.data_ptr(), src, size);
  return t;
}

MappedFile::MappedFile(const std::string& path, const std::string& origin) {
  // O_NONBLOCK: a FIFO in a file's place must not hang the open (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int saved = errno;
    if (fd >= 0) ::close(fd);
    throw CheckpointError(origin + " is missing or unreadable: " + std::strerror(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw CheckpointError(origin + " is missing or unreadable: not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int saved = errno;
      data_ = nullptr;
      ::close(fd);
      throw CheckpointError(origin + " is missing or unreadable: " + std::strerror(saved));
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace amptune::train::safetensors
