#include "core/hash.h"

#include <gtest/gtest.h>

#include <filesystem>
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

// Fingerprints depend on what lies below a path, never on the path (docs/CONFIG.md "Identity").
TEST(CoreHash, FingerprintsFollowContentsNotPaths) {
  testing::ScratchDir dir;
  namespace fs = std::filesystem;
  const std::string a = (dir.path() / "a").string(), b = (dir.path() / "elsewhere/b").string();
  for (const std::string& root : {a, b}) {
    fs::create_directories(root + "/cls0");
    fs::create_directories(root + "/cls1");
    testing::write_file(root + "/cls0/x.jpg", "pixels of x");
    testing::write_file(root + "/cls1/y.jpg", std::string(100000, 'y'));
  }
  const std::string fa = fingerprint_tree(a);
  EXPECT_EQ(fa.size(), 64u);
  EXPECT_EQ(fingerprint_tree(b), fa);  // a copy elsewhere
  EXPECT_EQ(fingerprint_file(a + "/cls0/x.jpg"), fingerprint_file(b + "/cls0/x.jpg"));
  EXPECT_NE(fingerprint_file(a + "/cls0/x.jpg"), fingerprint_file(a + "/cls1/y.jpg"));
  // A changed byte in a sampled piece, a renamed file, an added file: other data.
  testing::write_file(b + "/cls0/x.jpg", "pixels of X");
  EXPECT_NE(fingerprint_tree(b), fa);
  testing::write_file(b + "/cls0/x.jpg", "pixels of x");
  EXPECT_EQ(fingerprint_tree(b), fa);
  fs::rename(b + "/cls0/x.jpg", b + "/cls0/z.jpg");
  EXPECT_NE(fingerprint_tree(b), fa);
  fs::rename(b + "/cls0/z.jpg", b + "/cls0/x.jpg");
  testing::write_file(b + "/cls1/new.jpg", "");
  EXPECT_NE(fingerprint_tree(b), fa);
  // A file is not a folder's fingerprint, and missing paths are DataErrors naming them.
  EXPECT_NE(fingerprint_file(a + "/cls0/x.jpg"), sha256_hex("pixels of x"));
  EXPECT_THROW(fingerprint_tree(a + "/cls0/x.jpg"), DataError);
  try {
    fingerprint_file(a + "/missing");
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(a + "/missing"), std::string::npos) << e.what();
  }
}

TEST(CoreHash, FingerprintOfALargeFileSamplesItsPieces) {
  testing::ScratchDir dir;
  std::string bytes(65u << 20, '\0');  // above the whole-file limit
  const std::string path = dir.write("big.bin", bytes);
  const std::string before = fingerprint_file(path);
  bytes[0] = 1;  // inside the first sampled piece
  dir.write("big.bin", bytes);
  EXPECT_NE(fingerprint_file(path), before);
  bytes[0] = 0;
  bytes.push_back(0);  // another size
  dir.write("big.bin", bytes);
  EXPECT_NE(fingerprint_file(path), before);
}

}  // namespace
}  // namespace amptune
