#include "core/hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace amptune {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx new_sha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw Error(ExitCode::kInternal, "OpenSSL could not start a sha256 digest");
  }
  return ctx;
}

void update(EVP_MD_CTX* ctx, const void* data, size_t size) {
  if (EVP_DigestUpdate(ctx, data, size) != 1) {
    throw Error(ExitCode::kInternal, "OpenSSL sha256 update failed");
  }
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &size) != 1) {
    throw Error(ExitCode::kInternal, "OpenSSL sha256 final failed");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  MdCtx ctx = new_sha256();
  update(ctx.get(), bytes.data(), bytes.size());
  return finish_hex(ctx.get());
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw EnvironmentError("cannot open " + path + " to hash it: " + std::strerror(errno));
  }
  MdCtx ctx = new_sha256();
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) update(ctx.get(), buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    throw EnvironmentError("read error while hashing " + path + " (check the disk)");
  }
  return finish_hex(ctx.get());
}

namespace {

constexpr uint64_t kWholeFileLimit = 64ull << 20;  // bytes hashed whole
constexpr uint64_t kPiece = 1ull << 20;            // sampled piece of a larger file
constexpr int kPieces = 16;
constexpr size_t kTreeSamples = 64;                // files of a folder whose start is hashed
constexpr uint64_t kTreeSampleBytes = 64ull << 10;

// Hashes `length` bytes of `in` from `offset`; false on a read error.
bool hash_range(std::ifstream& in, uint64_t offset, uint64_t length, EVP_MD_CTX* ctx) {
  std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(length, 1 << 16)));
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  while (length > 0 && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(std::min<uint64_t>(length, buffer.size())));
    const auto got = static_cast<uint64_t>(in.gcount());
    if (got == 0) break;
    update(ctx, buffer.data(), static_cast<size_t>(got));
    length -= got;
  }
  return !in.bad();
}

std::ifstream open_for_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot read " + path + ": " + std::strerror(errno));
  return in;
}

}  // namespace

std::string fingerprint_file(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw DataError("cannot read " + path + ": " + ec.message());
  std::ifstream in = open_for_fingerprint(path);
  MdCtx ctx = new_sha256();
  const std::string head = "file " + std::to_string(size) + "\n";
  update(ctx.get(), head.data(), head.size());
  bool ok = true;
  if (size <= kWholeFileLimit) {
    ok = hash_range(in, 0, size, ctx.get());
  } else {
    for (int i = 0; i < kPieces && ok; ++i) {
      ok = hash_range(in, (size - kPiece) / (kPieces - 1) * static_cast<uint64_t>(i), kPiece,
                      ctx.get());
    }
  }
  if (!ok) throw DataError("read error while fingerprinting " + path + " (check the disk)");
  return finish_hex(ctx.get());
}

std::string fingerprint_tree(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    throw DataError("cannot fingerprint " + path + ": not a readable folder");
  }
  std::vector<std::pair<std::string, uint64_t>> files;  // relative path, size
  const auto options = fs::directory_options::follow_directory_symlink;
  for (fs::recursive_directory_iterator it(path, options, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    files.emplace_back(fs::relative(it->path(), path).generic_string(), it->file_size(ec));
    if (ec) break;
  }
  if (ec) throw DataError("cannot list " + path + ": " + ec.message());
  std::sort(files.begin(), files.end());
  MdCtx ctx = new_sha256();
  for (const auto& [name, size] : files) {
    const std::string line = name + " " + std::to_string(size) + "\n";
    update(ctx.get(), line.data(), line.size());
  }
  const size_t samples = std::min(files.size(), kTreeSamples);
  for (size_t s = 0; s < samples; ++s) {
    const auto& [name, size] = files[s * files.size() / samples];
    const std::string file = (fs::path(path) / name).string();
    std::ifstream in = open_for_fingerprint(file);
    if (!hash_range(in, 0, std::min(size, kTreeSampleBytes), ctx.get())) {
      throw DataError("read error while fingerprinting " + file + " (check the disk)");
    }
  }
  return finish_hex(ctx.get());
}

}  // namespace amptune
