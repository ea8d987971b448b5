#include "util/text.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "util/json.hpp"

namespace sb {
namespace {

const std::string r = "\xEF\xBF\xBD";  // U+FFFD

// ---- utf8_step / repair_utf8 / is_valid_utf8 ------------------------------------------------

TEST(Utf8Step, WellFormedCharactersOfEveryLength) {
  EXPECT_EQ(utf8_step("a").size, 1u);
  EXPECT_TRUE(utf8_step("a").valid);
  EXPECT_EQ(utf8_step("\xC3\xA9x").size, 2u);
  EXPECT_EQ(utf8_step("\xE2\x82\xACx").size, 3u);
  EXPECT_EQ(utf8_step("\xF0\x9F\x98\x80x").size, 4u);
  EXPECT_TRUE(utf8_step("\xF0\x9F\x98\x80x").valid);
  // The edges of the ranges RFC 3629 allows.
  for (std::string_view ok : {"\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF",
                              "\xEE\x80\x80", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF"}) {
    EXPECT_TRUE(utf8_step(ok).valid) << testing::PrintToString(ok);
    EXPECT_EQ(utf8_step(ok).size, ok.size()) << testing::PrintToString(ok);
  }
}

// One U+FFFD stands for the longest start of a sequence that breaks off, or for one byte that
// starts none: Unicode's "maximal subpart" practice, as a browser's TextDecoder applies it.
TEST(Utf8Step, IllFormedBytesAreTheirMaximalSubpart) {
  struct Case {
    std::string_view bytes;
    std::size_t size;
  };
  for (Case c : std::initializer_list<Case>{
           {"\x80", 1},              // a lone continuation byte
           {"\xFF", 1},              // never in UTF-8
           {"\xC0\xAF", 1},          // overlong lead
           {"\xC1\xBF", 1},          // overlong lead
           {"\xE0\x80\x80", 1},      // overlong: the second byte is out of range
           {"\xED\xA0\x80", 1},      // a UTF-16 surrogate
           {"\xF4\x90\x80\x80", 1},  // above U+10FFFF
           {"\xF5\x80\x80\x80", 1},  // a lead that cannot start anything
           {"\xE2\x82", 2},          // cut at the end
           {"\xE2\x82x", 2},         // broken off by ASCII
           {"\xF0\x9F\x98", 3},      // cut at the end
           {"\xF0\x9F\x98\xC3", 3},  // broken off by another lead
           {"\xC3", 1},              // a lead with nothing after it
       }) {
    Utf8Step step = utf8_step(c.bytes);
    EXPECT_FALSE(step.valid) << testing::PrintToString(c.bytes);
    EXPECT_EQ(step.size, c.size) << testing::PrintToString(c.bytes);
  }
}

TEST(RepairUtf8, ValidTextComesBackUnchanged) {
  EXPECT_EQ(repair_utf8(""), "");
  EXPECT_EQ(repair_utf8("plain"), "plain");
  EXPECT_EQ(repair_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(repair_utf8(std::string_view("a\0b", 3)), std::string("a\0b", 3));
}

TEST(RepairUtf8, EachMaximalSubpartBecomesOneReplacementCharacter) {
  EXPECT_EQ(repair_utf8("a\xFF"
                        "b"),
            "a" + r + "b");
  EXPECT_EQ(repair_utf8("cut \xE2\x82"), "cut " + r);  // a character cut at the end
  EXPECT_EQ(repair_utf8("x\xE2\x9C"
                        "y"),
            "x" + r + "y");                                           // broken off by ASCII
  EXPECT_EQ(repair_utf8("caf\xE9 latin-1"), "caf" + r + " latin-1");  // not UTF-8 at all
  EXPECT_EQ(repair_utf8("\xC0\xAF"), r + r);                          // overlong
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), r + r + r);                  // a surrogate
  EXPECT_EQ(repair_utf8("\xF4\x90\x80\x80"), r + r + r + r);          // above U+10FFFF
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98\xF0\x9F\x98\x80"), r + "\xF0\x9F\x98\x80");
}

TEST(IsValidUtf8, AgreesWithRepair) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("caf\xE9"));
  EXPECT_FALSE(is_valid_utf8("cut \xE2\x82"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));
}

// Random bytes, biased to the ones UTF-8 is made of: the repair is always valid, a repair of a
// repair changes nothing, the JSON writer replaces exactly as the repair does, and valid input
// is what is_valid_utf8 says.
TEST(RepairUtf8, RandomBytesComeOutValidAndAsTheJsonWriterWritesThem) {
  std::mt19937 rng(16);
  const unsigned char alphabet[] = {'a',  ' ',  0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0,
                                    0xC2, 0xDF, 0xE0, 0xE2, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
  for (int round = 0; round < 20000; ++round) {
    std::string bytes(rng() % 12, '\0');
    for (char& c : bytes)
      c = static_cast<char>(alphabet[rng() % sizeof alphabet]);
    std::string repaired = repair_utf8(bytes);
    ASSERT_TRUE(is_valid_utf8(repaired)) << testing::PrintToString(bytes);
    ASSERT_EQ(repair_utf8(repaired), repaired) << testing::PrintToString(bytes);
    ASSERT_EQ(is_valid_utf8(bytes), repaired == bytes) << testing::PrintToString(bytes);
    std::string literal;
    append_json_string(literal, bytes);
    auto back = parse_json(literal);
    ASSERT_TRUE(back) << literal;
    ASSERT_EQ(back->as_string(), repaired) << testing::PrintToString(bytes);
  }
}

// ---- utf8_prefix --------------------------------------------------------------------------------

TEST(Utf8Prefix, CutsOnACharacterBoundary) {
  EXPECT_EQ(utf8_prefix("hello", 10), "hello");
  EXPECT_EQ(utf8_prefix("hello", 5), "hello");
  EXPECT_EQ(utf8_prefix("hello", 3), "hel");
  EXPECT_EQ(utf8_prefix("hello", 0), "");
  const std::string euros = "\xE2\x82\xAC\xE2\x82\xAC";  // two 3-byte characters
  EXPECT_EQ(utf8_prefix(euros, 6), euros);
  EXPECT_EQ(utf8_prefix(euros, 5), "\xE2\x82\xAC");
  EXPECT_EQ(utf8_prefix(euros, 4), "\xE2\x82\xAC");
  EXPECT_EQ(utf8_prefix(euros, 3), "\xE2\x82\xAC");
  EXPECT_EQ(utf8_prefix(euros, 2), "");
  // Invalid text is cut without reading past its end.
  EXPECT_EQ(utf8_prefix("\x80\x80\x80", 2), "");
  EXPECT_EQ(utf8_prefix("a\xFF"
                        "b",
                        2),
            "a\xFF");
}

// ---- trim / ascii_lower / ascii_iequals -------------------------------------------------------

TEST(Trim, RemovesAsciiWhitespaceAtBothEnds) {
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t\n\v\f\r"), "");
  EXPECT_EQ(trim("  a b \n"), "a b");
  EXPECT_EQ(trim("\va\f"), "a");  // what C's isspace calls space
  EXPECT_EQ(trim("a"), "a");
  EXPECT_EQ(trim("\xC2\xA0"
                 "a\xC2\xA0"),
            "\xC2\xA0"
            "a\xC2\xA0");  // U+00A0 is not ASCII whitespace
}

TEST(Trim, TakesTheCharactersToRemove) {
  EXPECT_EQ(trim(" \t{}\r\n", kJsonSpace), "{}");
  EXPECT_EQ(trim("\v{}\f", kJsonSpace), "\v{}\f");  // not JSON whitespace
  EXPECT_EQ(trim("--a-b--", "-"), "a-b");
}

TEST(AsciiLower, LowersOnlyAToZ) {
  EXPECT_EQ(ascii_lower(""), "");
  EXPECT_EQ(ascii_lower("Text/HTML; Charset=UTF-8"), "text/html; charset=utf-8");
  EXPECT_EQ(ascii_lower("@[`{"), "@[`{");  // the neighbours of A-Z and a-z
  EXPECT_EQ(ascii_lower("\xC3\x89T\xC3\x89"), "\xC3\x89t\xC3\x89");  // UTF-8 bytes as they are
}

TEST(AsciiIequals, IgnoresTheCaseOfAToZ) {
  EXPECT_TRUE(ascii_iequals("", ""));
  EXPECT_TRUE(ascii_iequals("Content-Type", "content-TYPE"));
  EXPECT_TRUE(ascii_iequals("Basic", "basic"));
  EXPECT_FALSE(ascii_iequals("Basic", "Basic "));
  // 0x40 and 0x60 differ by the case bit, as 'A' and 'a' do, but are no letters.
  EXPECT_FALSE(ascii_iequals("@", "`"));
  EXPECT_FALSE(ascii_iequals("\xC3\x89", "\xC3\xA9"));  // only ASCII letters fold
}

}  // namespace
}  // namespace sb
