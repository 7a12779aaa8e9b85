// The safetensors layout on its own: what serialize writes, View reads back bit for bit, with
// each tensor aligned to its element size; a minimal file by hand; the bounds of a header, each
// refused at its crossing, with short messages; a stop while reading; MappedFile's errors; the
// error type of each Source. (Crafted broken files: train/checkpoint_test.cpp, through the
// checkpoint reader that uses View; data shards: tensors_test.cpp.)
#include <cstring>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "data/safetensors.h"
#include "support/scratch.h"

namespace amptune::data::safetensors {
namespace {

constexpr Source kCheckpoint = Source::kCheckpoint;

// A file of header text `header` (padded to `length` bytes with spaces when longer) and `data`.
std::string file_of(const std::string& header, const std::string& data, size_t length = 0) {
  std::string text = header;
  if (length > text.size()) text.append(length - text.size(), ' ');
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  return bytes + text + data;
}

// A header of `n` one-byte tensors "t0", "t1", ... tiling n bytes of data.
std::string many_tensors(size_t n) {
  std::string header = "{";
  for (size_t i = 0; i < n; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
              std::to_string(i + 1) + "]}";
  }
  return header + "}";
}

// The message of the CheckpointError that reading `bytes` throws ("" and a failure when none).
std::string refusal(const std::string& bytes) {
  try {
    View view(bytes, "crafted", kCheckpoint);
    ADD_FAILURE() << "read without an error";
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

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
  const View view(bytes, "mem", kCheckpoint);
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
  const View view(bytes, "hand", kCheckpoint);
  EXPECT_TRUE(view.metadata().empty());
  EXPECT_EQ(view.copy("a").item<float>(), 1.5f);
  EXPECT_TRUE(torch::equal(view.copy("b"), torch::tensor({-7, 9}, torch::kInt)));
  // A BOOL byte other than 0 or 1 is refused when copied out.
  const std::string bool_header = R"({"t":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
  std::string bad(8, '\0');
  const uint64_t m = bool_header.size();
  std::memcpy(bad.data(), &m, 8);
  bad += bool_header + std::string("\x01\x07", 2);
  EXPECT_THROW(View(bad, "bool", kCheckpoint).copy("t"), CheckpointError);
}

// docs/SECURITY.md "Checkpoints": the header's length, its tensors and a shape's dimensions are
// bounded, each refused at the bound and read just below it, before anything grows with the
// input (a shape of a million dimensions cost memory and a message of megabytes before).
TEST(Safetensors, HeaderBoundsAreRefusedWhereTheyAreCrossed) {
  EXPECT_EQ(
      View(file_of(many_tensors(kMaxEntries), std::string(kMaxEntries, '\0')), "at", kCheckpoint)
          .entries()
          .size(),
      kMaxEntries);
  EXPECT_NE(refusal(file_of(many_tensors(kMaxEntries + 1), std::string(kMaxEntries + 1, '\0')))
                .find("header describes more than 10000 tensors"),
            std::string::npos);

  const std::string one = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_EQ(View(file_of(one, "x", kMaxHeaderBytes), "at", kCheckpoint).entries().size(), 1u);
  EXPECT_NE(refusal(file_of(one, "x", kMaxHeaderBytes + 1))
                .find("header length 16000001 exceeds the limit of 16000000"),
            std::string::npos);

  auto shape_of_ones = [](size_t rank) {
    std::string dims = "1";
    for (size_t i = 1; i < rank; ++i) dims += ",1";
    return R"({"t":{"dtype":"U8","shape":[)" + dims + R"(],"data_offsets":[0,1]}})";
  };
  EXPECT_EQ(
      View(file_of(shape_of_ones(kMaxRank), "x"), "at", kCheckpoint).entries().at("t").shape.size(),
      kMaxRank);
  const std::string deep = refusal(file_of(shape_of_ones(1'000'000), "x"));
  EXPECT_NE(deep.find("tensor \"t\" has more than 16 dimensions"), std::string::npos) << deep;
  EXPECT_NE(refusal(file_of(R"({"t":{"shape":[)" + std::string(100000, '['), "x"))
                .find("has a shape entry that is not a non-negative integer"),
            std::string::npos);
}

// Text of the file quoted in an error is clipped: a name of a megabyte gives a short message.
TEST(Safetensors, ErrorsQuoteAtMostAFewHundredBytesOfTheFile) {
  const std::string name(1 << 20, 'n');
  for (const std::string& header :
       {R"({")" + name + R"(":{"dtype":"F99","shape":[1],"data_offsets":[0,1]}})",
        R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{")" + name +
            R"(":1}})",
        R"({"t":{")" + name + R"(":1}})", R"({")" + name}) {  // the last one: not JSON
    const std::string what = refusal(file_of(header, "x"));
    EXPECT_LT(what.size(), log::kQuotedBytes + 200) << what.substr(0, 300);
    EXPECT_NE(what.find(" bytes cut)"), std::string::npos) << what.substr(0, 300);
  }
}

// A stop asked for (a signal inside a run, core/process.h) ends the reading of a checkpoint's
// header with Stopped, not a CheckpointError (a resume would take that for damage and fall back;
// train turns Stopped into RunStopped: CraftedCheckpoint.AStopWhileReadingTheHeaderEndsTheRunAs-
// Interrupted). A data shard's header is read whole. In a child process: the stop flag stays set
// for the rest of a process.
TEST(Safetensors, AStopRequestedEndsTheReadingAsAStop) {
  const std::string bytes = file_of(many_tensors(100), std::string(100, '\0'));
  EXPECT_EXIT(
      {
        request_stop();
        try {
          View view(bytes, "stopped", kCheckpoint);
        } catch (const Stopped& e) {
          const bool named =
              std::string(e.what()).find("reading the header of stopped") != std::string::npos;
          if (!named) std::exit(2);
          // A data shard's header is read to its end and checked as usual.
          const View shard(bytes, "shard", Source::kData);
          std::exit(shard.entries().size() == 100 ? 0 : 5);
        } catch (...) {
          std::exit(3);
        }
        std::exit(4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Safetensors, MappedFileNamesWhatItCannotOpen) {
  const std::string dir = testing::scratch_dir();
  try {
    MappedFile missing(dir + "/nope", "checkpoint " + dir + "/nope", kCheckpoint);
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/nope is missing or unreadable"), std::string::npos)
        << e.what();
  }
  try {
    MappedFile folder(dir, "folder", kCheckpoint);
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/empty").close();
  EXPECT_EQ(MappedFile(dir + "/empty", "empty", kCheckpoint).bytes().size(), 0u);
  std::ofstream(dir + "/four") << "abcd";
  EXPECT_EQ(MappedFile(dir + "/four", "four", Source::kData).bytes(), "abcd");
}

// The same violations are CheckpointErrors for a checkpoint's reader and DataErrors for a data
// shard's, with the same message (a data shard's exits 4, a checkpoint's 6).
TEST(Safetensors, EachSourceThrowsItsOwnErrorWithTheSameMessage) {
  const std::string dir = testing::scratch_dir();
  const std::string bool_header = R"({"t":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})";
  const std::vector<std::function<void(Source)>> cases = {
      [](Source s) { View(std::string("short"), "f", s); },
      [](Source s) {
        View(file_of(many_tensors(kMaxEntries + 1), std::string(kMaxEntries + 1, '\0')), "f", s);
      },
      [](Source s) { View(file_of("{\"t\":", "x"), "f", s); },
      [&](Source s) { View(file_of(bool_header, "\x07"), "f", s).copy("t"); },
      [&](Source s) { MappedFile(dir + "/nope", "f", s); },
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    std::string as_checkpoint, as_data;
    try {
      cases[i](Source::kCheckpoint);
    } catch (const CheckpointError& e) {
      as_checkpoint = e.what();
    }
    try {
      cases[i](Source::kData);
    } catch (const DataError& e) {
      as_data = e.what();
    }
    EXPECT_EQ(as_checkpoint.rfind("f", 0), 0u) << as_checkpoint;
    if (i == 1) {  // the bound names what it bounds
      EXPECT_NE(as_checkpoint.find("the most a checkpoint may hold"), std::string::npos);
      EXPECT_NE(as_data.find("the most a data shard may hold"), std::string::npos);
    } else {
      EXPECT_EQ(as_data, as_checkpoint);
    }
  }
}

}  // namespace
}  // namespace amptune::data::safetensors
