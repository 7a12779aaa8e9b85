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

std::string clipped(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t keep = max_bytes;
  // Back to the start of a character: UTF-8 continuation bytes are 10xxxxxx.
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xc0) == 0x80) --keep;
  const size_t cut = text.size() - keep;
  return std::string(text.substr(0, keep)) + "... (" + std::to_string(cut) +
         (cut == 1 ? " byte cut)" : " bytes cut)");
}
}  // namespace amptune::log
