#include "core/hash.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "support/scratch.h"

namespace amptune {
namespace {

TEST(CoreHash, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string("a\0b", 3)),
            "59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138");
}

TEST(CoreHash, FileEqualsHashOfItsBytesAcrossChunks) {
  testing::ScratchDir dir;
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes += static_cast<char>((i * 131) % 256);  // > 3 chunks
  const std::string path = dir.write("blob.bin", bytes);
  EXPECT_EQ(sha256_file(path), sha256_hex(bytes));
  EXPECT_EQ(sha256_file(dir.write("abc.txt", "abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_file(dir.write("empty", "")), sha256_hex(""));
}

TEST(CoreHash, MissingFileThrowsNamingThePath) {
  testing::ScratchDir dir;
  const std::string path = (dir.path() / "missing.bin").string();
  try {
    sha256_file(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amptune
