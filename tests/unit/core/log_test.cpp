// log::clipped: text from elsewhere put into a message keeps a bounded length and says how much
// was cut, never splitting a UTF-8 character.
#include <gtest/gtest.h>

#include <string>

#include "core/log.h"

namespace amptune::log {
namespace {

TEST(Log, ClippedKeepsShortTextAndCutsLongTextSayingHowMuch) {
  EXPECT_EQ(clipped("", 4), "");
  EXPECT_EQ(clipped("abcd", 4), "abcd");
  EXPECT_EQ(clipped("abcdef", 4), "abcd... (2 bytes cut)");
  EXPECT_EQ(clipped(std::string(100000, 'n'), 3), "nnn... (99997 bytes cut)");
  // "é" is two bytes (c3 a9): a cut inside it keeps the character out whole.
  EXPECT_EQ(clipped("ab\xc3\xa9z", 3), "ab... (3 bytes cut)");
  EXPECT_EQ(clipped("ab\xc3\xa9z", 4), "ab\xc3\xa9... (1 byte cut)");
}

}  // namespace
}  // namespace amptune::log
