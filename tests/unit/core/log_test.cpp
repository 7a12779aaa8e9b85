// log::printable: what a terminal would obey is escaped, valid UTF-8 text passes unchanged.
// log::clipped: text from elsewhere put into a message keeps a bounded length and says how much
// was cut, never splitting a UTF-8 character.
#include <gtest/gtest.h>

#include <string>

#include "core/log.h"

namespace amptune {
namespace {

using log::clipped;
using log::printable;

TEST(CoreLog, C0ControlsAndDelAreEscaped) {
  EXPECT_EQ(printable("a\x1b[2Jb\r\x07\x7f"), "a\\x1b[2Jb\\x0d\\x07\\x7f");
  EXPECT_EQ(printable("a\nb\tc"), "a\\x0ab\\x09c");
  EXPECT_EQ(printable("a\nb\tc\r", /*keep_lines=*/true), "a\nb\tc\\x0d");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
}

// Terminals obey C1 controls too (U+009B is CSI, U+009D OSC): escaped as code points.
TEST(CoreLog, C1ControlsAreEscapedAsCodePoints) {
  EXPECT_EQ(printable("a\xc2\x9b" "31m"), "a\\u009b31m");
  EXPECT_EQ(printable("\xc2\x80\xc2\x85\xc2\x9f"), "\\u0080\\u0085\\u009f");
  EXPECT_EQ(printable("\xc2\xa0\xc2\xa9"), "\xc2\xa0\xc2\xa9");  // NBSP and (c): text
}

TEST(CoreLog, ValidUtf8PassesUnchanged) {
  const std::string text = "Gr\xc3\xbc\xc3\x9f" "e \xe2\x82\xac \xe4\xb8\xad \xf0\x9f\x98\x80";
  EXPECT_EQ(printable(text), text);
}

// Each byte that is not part of a valid UTF-8 sequence is written as \xNN, so a truncated
// sequence cannot swallow the bytes after it.
TEST(CoreLog, InvalidUtf8BytesAreEscaped) {
  EXPECT_EQ(printable("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(printable("\x80"), "\\x80");                  // a stray continuation byte
  EXPECT_EQ(printable("\xc3" "a"), "\\xc3a");             // truncated
  EXPECT_EQ(printable("\xe2\x82"), "\\xe2\\x82");         // truncated at the end
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");         // overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // overlong
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
  EXPECT_EQ(printable("\xc2\x1b"), "\\xc2\\x1b");         // a control cannot hide in a sequence
}

TEST(CoreLog, EscapingTwiceChangesNothing) {
  const std::string once = printable("\x1b\xc2\x9b\xff\r");
  EXPECT_EQ(printable(once), once);
}

TEST(CoreLog, ClippedKeepsShortTextAndCutsLongTextSayingHowMuch) {
  EXPECT_EQ(clipped("", 4), "");
  EXPECT_EQ(clipped("abcd", 4), "abcd");
  EXPECT_EQ(clipped("abcdef", 4), "abcd... (2 bytes cut)");
  EXPECT_EQ(clipped(std::string(100000, 'n'), 3), "nnn... (99997 bytes cut)");
  // "é" is two bytes (c3 a9): a cut inside it keeps the character out whole.
  EXPECT_EQ(clipped("ab\xc3\xa9z", 3), "ab... (3 bytes cut)");
  EXPECT_EQ(clipped("ab\xc3\xa9z", 4), "ab\xc3\xa9... (1 byte cut)");
}

}  // namespace
}  // namespace amptune
