// Helpers of the data-layer tests: a fresh temp folder per test, small files.
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

namespace amptune::data::testing_util {

// A new empty folder under testing::TempDir(), unique per test and process.
inline std::string fresh_dir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string("amptune_data_") + info->test_suite_name() + "_" + info->name() +
                     tag + "_" + std::to_string(::getpid());
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

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

inline std::string fixture(const std::string& rel) {
  return std::string(AMPTUNE_FIXTURE_DIR) + "/data/" + rel;
}

}  // namespace amptune::data::testing_util
