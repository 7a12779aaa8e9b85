// The safetensors layout on its own: what serialize writes, View reads back bit for bit, with
// each tensor aligned to its element size; a minimal file by hand; MappedFile's errors. (Crafted
// broken files: checkpoint_test.cpp, through the checkpoint reader that uses View.)
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/error.h"
#include "support/scratch.h"
#include "train/safetensors.h"

namespace amptune::train::safetensors {
namespace {

TEST(Safetensors, RoundTripOfEveryDtypeIsExactAndAligned) {
  torch::manual_seed(5);
  const std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"u8", torch::randint(0, 256, {3}, torch::kByte)},
      {"f32", torch::randn({2, 3})},
      {"f16", torch::randn({5}).to(torch::kHalf)},
      {"bf16", torch::randn({1, 2}).to(torch::kBFloat16)},
      {"i64", torch::scalar_tensor(int64_t{1} << 40, torch::kLong)},
      {"f64", torch::randn({2}, torch::kDouble)},
      {"i32", torch::randint(-5, 5, {4}, torch::kInt)},
      {"i16", torch::randint(-5, 5, {1}, torch::kShort)},
      {"i8", torch::randint(-5, 5, {2}, torch::kChar)},
      {"bool", torch::tensor({true, false, true})},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::randn({4, 3}).t()},  // written contiguous
  };
  const std::string bytes = serialize(tensors, {{"k", "v"}, {"format", "x"}});
  EXPECT_EQ(bytes, serialize(tensors, {{"format", "x"}, {"k", "v"}}));  // deterministic
  const View view(bytes, "mem");
  EXPECT_EQ(view.metadata(), (std::map<std::string, std::string>{{"k", "v"}, {"format", "x"}}));
  ASSERT_EQ(view.entries().size(), tensors.size());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const Entry& e = view.entries().at(name);
    EXPECT_EQ(e.dtype, t.scalar_type());
    EXPECT_EQ(e.begin % t.element_size(), 0u);  // aligned in the data area (and the file)
    const torch::Tensor back = view.copy(name);
    EXPECT_EQ(back.sizes(), t.sizes());
    EXPECT_TRUE(torch::equal(back, t));
  }
  EXPECT_EQ(dtype_name(torch::kBFloat16), "BF16");
  EXPECT_THROW(dtype_name(torch::kComplexFloat), CheckpointError);
  EXPECT_THROW(serialize({{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}, {}),
               CheckpointError);
}

// A file written by hand from the format's description reads as written.
TEST(Safetensors, AHandWrittenFileReads) {
  const std::string header = R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]},)"
                             R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  const float a = 1.5f;
  const int32_t b[2] = {-7, 9};
  bytes.append(reinterpret_cast<const char*>(&a), 4);
  bytes.append(reinterpret_cast<const char*>(b), 8);
  const View view(bytes, "hand");
  EXPECT_TRUE(view.metadata().empty());
  EXPECT_EQ(view.copy("a").item<float>(), 1.5f);
  EXPECT_TRUE(torch::equal(view.copy("b"), torch::tensor({-7, 9}, torch::kInt)));
  // A BOOL byte other than 0 or 1 is refused when copied out.
  const std::string bool_header = R"({"t":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
  std::string bad(8, '\0');
  const uint64_t m = bool_header.size();
  std::memcpy(bad.data(), &m, 8);
  bad += bool_header + std::string("\x01\x07", 2);
  EXPECT_THROW(View(bad, "bool").copy("t"), CheckpointError);
}

TEST(Safetensors, MappedFileNamesWhatItCannotOpen) {
  const std::string dir = testing::scratch_dir();
  try {
    MappedFile missing(dir + "/nope", "checkpoint " + dir + "/nope");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/nope is missing or unreadable"), std::string::npos)
        << e.what();
  }
  try {
    MappedFile folder(dir, "folder");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/empty").close();
  EXPECT_EQ(MappedFile(dir + "/empty", "empty").bytes().size(), 0u);
  std::ofstream(dir + "/four") << "abcd";
  EXPECT_EQ(MappedFile(dir + "/four", "four").bytes(), "abcd");
}

}  // namespace
}  // namespace amptune::train::safetensors
