// Helpers of the data-layer tests: small files and images (scratch directories: support/scratch.h).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/image.h"
#include "support/scratch.h"

namespace amptune::data::testing_util {

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A smooth RGB (or grey) gradient that JPEG keeps within a few levels.
inline Image gradient(int width, int height, int channels, int seed = 0) {
  Image im;
  im.width = width;
  im.height = height;
  im.channels = channels;
  im.pixels.resize(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = (x * 200 / std::max(1, width - 1) + y * 40 / std::max(1, height - 1) +
                       c * 7 + seed * 3) % 256;
        im.pixels[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v);
      }
    }
  }
  return im;
}

// The message of the DataError fn() throws, "" when it throws none.
template <typename Fn>
std::string data_error_of(Fn fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// A line "Name:   N kB" of /proc/self/status, in kB (0 when missing).
inline int64_t proc_status_kb(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1));
  }
  return 0;
}

// How far the resident set rose above its size at the start while fn() ran, in MB: the peak
// (VmHWM) is reset through /proc/self/clear_refs first (Linux 4.0), so earlier tests' peaks do
// not hide this one's.
template <typename Fn>
int64_t peak_rss_growth_mb(Fn fn) {
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const int64_t before = proc_status_kb("VmRSS");
  fn();
  return (proc_status_kb("VmHWM") - before) / 1024;
}

inline std::string fixture(const std::string& rel) {
  return std::string(AMPTUNE_FIXTURE_DIR) + "/data/" + rel;
}

}  // namespace amptune::data::testing_util
