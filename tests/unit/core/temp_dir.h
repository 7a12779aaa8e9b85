// A per-test scratch directory under testing::TempDir(), removed when the test ends.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace amptune::testing_util {

class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("amptune_core_") + info->test_suite_name() + "_" + info->name() +
                       "_" + std::to_string(::getpid());
    path_ = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to <dir>/<name> and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    auto file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out << text;
    out.close();
    EXPECT_TRUE(out.good()) << "cannot write " << file;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace amptune::testing_util
