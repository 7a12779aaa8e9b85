#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace amptune::log {
namespace {
std::atomic<bool> g_quiet{false};
std::mutex g_mutex;
void emit(const char* prefix, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "amptune: %s%s\n", prefix, printable(message, true).c_str());
  std::fflush(stderr);
}
}  // namespace

void info(const std::string& message) {
  if (!g_quiet) emit("", message);
}
void warn(const std::string& message) { emit("warning: ", message); }
void set_quiet(bool quiet) { g_quiet = quiet; }

std::string printable(const std::string& text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u != 0x7f) || (keep_lines && (c == '\n' || c == '\t'))) {
      out += c;
      continue;
    }
    static const char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[u >> 4];
    out += kHex[u & 0xf];
  }
  return out;
}
}  // namespace amptune::log
