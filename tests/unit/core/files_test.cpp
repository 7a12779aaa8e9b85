#include "core/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "support/scratch.h"

namespace amptune {
namespace {

namespace fs = std::filesystem;

int count_files(const std::string& dir) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_symlink() ? 0 : 1;
  return files;
}

TEST(CoreFiles, AtomicWriteCreatesTheFolderAndLeavesNoTempFile) {
  testing::ScratchDir dir;
  const std::string path = dir.path().string() + "/x/y.bin";
  write_file_atomic(path, std::string("he\0llo", 6));
  EXPECT_EQ(testing::read_file(path), std::string("he\0llo", 6));
  write_file_atomic(path, "again");  // over an existing file
  EXPECT_EQ(testing::read_file(path), "again");
  EXPECT_EQ(count_files(dir.path().string() + "/x"), 1);
}

TEST(CoreFiles, APlantedLinkIsNeverWrittenThrough) {
  testing::ScratchDir dir;
  const std::string victim = dir.write("victim.txt", "keep me");
  const std::string path = dir.path().string() + "/out.bin";
  // A link at this process's temp name, and one at the target itself.
  fs::create_symlink(victim, atomic_temp_name(path, ::getpid()));
  write_file_atomic(path, "new bytes");
  EXPECT_EQ(testing::read_file(victim), "keep me");
  EXPECT_EQ(testing::read_file(path), "new bytes");
  EXPECT_FALSE(fs::exists(fs::symlink_status(atomic_temp_name(path, ::getpid()))));
  const std::string linked = dir.path().string() + "/linked.bin";
  fs::create_symlink(victim, linked);
  write_file_atomic(linked, "replaced");
  EXPECT_EQ(testing::read_file(victim), "keep me");
  EXPECT_FALSE(fs::is_symlink(linked));
  EXPECT_EQ(testing::read_file(linked), "replaced");
}

TEST(CoreFiles, AnUnwritablePathIsAnEnvironmentErrorNamingIt) {
  testing::ScratchDir dir;
  const std::string file = dir.write("y.bin", "data");
  try {
    write_file_atomic(file + "/z.bin", "data");  // below a regular file
    ADD_FAILURE() << "no error";
  } catch (const EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("y.bin"), std::string::npos) << e.what();
  }
  EXPECT_EQ(testing::read_file(file), "data");
}

}  // namespace
}  // namespace amptune
