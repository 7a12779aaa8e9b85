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
  std::fprintf(stderr, "amptune: %s%s\n", prefix, message.c_str());
  std::fflush(stderr);
}
}  // namespace

void info(const std::string& message) {
  if (!g_quiet) emit("", message);
}
void warn(const std::string& message) { emit("warning: ", message); }
void set_quiet(bool quiet) { g_quiet = quiet; }
}  // namespace amptune::log
