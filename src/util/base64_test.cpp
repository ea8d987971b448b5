#include "util/base64.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

namespace sb {
namespace {

// RFC 4648's test vectors, and bytes that are not text.
struct Vector {
  std::string_view bytes, text;
};
constexpr Vector kVectors[] = {
    {"", ""},
    {"f", "Zg=="},
    {"fo", "Zm8="},
    {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="},
    {"fooba", "Zm9vYmE="},
    {"foobar", "Zm9vYmFy"},
    {{"\0\xff\xfe", 3}, "AP/+"},
    {"user:secret", "dXNlcjpzZWNyZXQ="},
};

TEST(Base64, EncodesTheVectors) {
  for (const Vector& v : kVectors)
    EXPECT_EQ(base64_encode(v.bytes), v.text) << testing::PrintToString(v.bytes);
}

TEST(Base64, DecodesTheVectors) {
  for (const Vector& v : kVectors)
    EXPECT_EQ(base64_decode(v.text), v.bytes) << v.text;
}

TEST(Base64, RefusesWhatIsNotBase64) {
  EXPECT_FALSE(base64_decode("Zg="));       // not a multiple of 4
  EXPECT_FALSE(base64_decode("Zm9vY"));     // not a multiple of 4
  EXPECT_FALSE(base64_decode("Zm9*"));      // outside the alphabet
  EXPECT_FALSE(base64_decode("Zm9v!!!!"));  // outside the alphabet
  EXPECT_FALSE(base64_decode("Zm-_"));      // the URL-safe alphabet is another one
}

// Every length around the 3-byte groups, and one input longer than the pieces the encoder hands
// to OpenSSL at a time, come back as they went in.
TEST(Base64, RoundTripsEveryLength) {
  std::mt19937 rng(4648);
  for (std::size_t size : {0, 1, 2, 3, 4, 5, 6, 7, 100, 1000, (3 << 20) + 2}) {
    std::string bytes(size, '\0');
    for (char& c : bytes)
      c = static_cast<char>(rng());
    std::string text = base64_encode(bytes);
    ASSERT_EQ(text.size(), (size + 2) / 3 * 4) << size;
    ASSERT_EQ(base64_decode(text), bytes) << size;
  }
}

}  // namespace
}  // namespace sb
