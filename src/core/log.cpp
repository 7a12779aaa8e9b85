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

namespace {
// `prefix` and the two hex digits of `u`: \xNN (a byte) or \u00NN (a C1 control).
void escape(const char* prefix, unsigned char u, std::string& out) {
  static const char kHex[] = "0123456789abcdef";
  out += prefix;
  out += kHex[u >> 4];
  out += kHex[u & 0xf];
}

// The length of the valid UTF-8 sequence of two or more bytes at text[i], or 0 when there is
// none (RFC 3629: no overlong forms, no surrogates, nothing beyond U+10FFFF).
size_t utf8_length(const std::string& text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = at(i);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3;
    if (lead == 0xe0) lo = 0xa0;  // overlong
    if (lead == 0xed) hi = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4;
    if (lead == 0xf0) lo = 0x90;  // overlong
    if (lead == 0xf4) hi = 0x8f;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return n;
}
}  // namespace

std::string printable(const std::string& text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u < 0x80) {
      if ((u >= 0x20 && u != 0x7f) || (keep_lines && (u == '\n' || u == '\t'))) {
        out += text[i];
      } else {
        escape("\\x", u, out);
      }
      ++i;
      continue;
    }
    const size_t n = utf8_length(text, i);
    const auto second = n ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (n == 0) {
      escape("\\x", u, out);  // not UTF-8: each byte on its own
      ++i;
    } else if (u == 0xc2 && second <= 0x9f) {
      escape("\\u00", second, out);  // a C1 control, U+0080 - U+009F (CSI, OSC, NEL, ...)
      i += 2;
    } else {
      out.append(text, i, n);
      i += n;
    }
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
