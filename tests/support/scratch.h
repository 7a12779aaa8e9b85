// Scratch space for tests, shared by every test target (tests/CMakeLists.txt puts tests/ on the
// include path): one fresh directory per test, and small file helpers. Header-only.
//
//   const std::string dir = testing::scratch_dir();        // kept after the test (inspect it)
//   testing::ScratchDir tmp;  tmp.write("s.yaml", text);   // removed when `tmp` goes
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace amptune::testing {

// A new, empty directory <gtest TempDir>/amptune/<suite>.<test>[.<tag>].<pid>, unique per test,
// tag and process. Left in place after the test so a failure can be inspected.
inline std::string scratch_dir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info ? info->test_suite_name() : "no-test") + "." +
                     (info ? info->name() : "") + (tag.empty() ? "" : "." + tag) + "." +
                     std::to_string(::getpid());
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "amptune" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to `path` (creating its directory); a failed write fails the test.
inline void write_file(const std::string& path, const std::string& text) {
  const std::filesystem::path file(path);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

// A scratch directory removed when the object goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag = "") : path_(scratch_dir(tag)) {}
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to <dir>/<name> and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    write_file(file, text);
    return file;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace amptune::testing
