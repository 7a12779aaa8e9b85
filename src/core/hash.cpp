#include "core/hash.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
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

}  // namespace amptune
