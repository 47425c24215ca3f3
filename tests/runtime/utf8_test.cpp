// runtime/utf8.h: the first invalid byte of a text, and a printable copy of it for messages quoting damaged files.
#include "runtime/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace wick {
namespace {

using namespace std::string_literals;

TEST(Utf8, FirstInvalidByte) {
  EXPECT_EQ(invalid_utf8_at("plain ascii"), std::string::npos);
  EXPECT_EQ(invalid_utf8_at("caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80"), std::string::npos);
  EXPECT_EQ(invalid_utf8_at("ab\xff"), 2u);
  EXPECT_EQ(invalid_utf8_at("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(invalid_utf8_at("x\xed\xa0\x80"), 1u);     // a UTF-16 surrogate
  EXPECT_EQ(invalid_utf8_at("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(invalid_utf8_at("ok\xe4\xbd"), 2u);        // cut short
}

TEST(Utf8, PrintableEscapesStrayBytesAndControls) {
  EXPECT_EQ(printable_utf8("caf\xc3\xa9\ttab\nline"), "caf\xc3\xa9\ttab\nline");
  EXPECT_EQ(printable_utf8("header \xff\xfe\x01\x80 end"), "header \\xff\\xfe\\x01\\x80 end");
  EXPECT_EQ(printable_utf8("nul \0 del \x7f esc \x1b[31m"s), "nul \\x00 del \\x7f esc \\x1b[31m");
  EXPECT_EQ(printable_utf8("cut \xe4\xbd"), "cut \\xe4\\xbd");
  const std::string printed = printable_utf8("\xc0\xaf\xed\xa0\x80\xf0\x9f\x98\x80");
  EXPECT_EQ(invalid_utf8_at(printed), std::string::npos);
  EXPECT_EQ(printed, "\\xc0\\xaf\\xed\\xa0\\x80\xf0\x9f\x98\x80");
}

}  // namespace
}  // namespace wick
