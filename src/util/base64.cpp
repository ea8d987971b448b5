#include "util/base64.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cstddef>
#include <limits>

namespace sb {

std::string base64_encode(std::string_view bytes) {
  // EVP_EncodeBlock takes an int length: a multiple of 3 at a time, so that only the last piece
  // is padded.
  constexpr std::size_t kPiece = std::size_t{3} << 20;
  std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');  // + 1: it writes a NUL at the end
  std::size_t written = 0;
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    std::size_t n = std::min(kPiece, bytes.size() - at);
    written += static_cast<std::size_t>(EVP_EncodeBlock(
        reinterpret_cast<unsigned char*>(out.data() + written),
        reinterpret_cast<const unsigned char*>(bytes.data() + at), static_cast<int>(n)));
  }
  out.resize(written);
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty()) return std::string();
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<int>::max());
  if (text.size() % 4 != 0 || text.size() > kMax) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  // EVP_DecodeBlock counts the zero bytes that the padding stands for.
  std::size_t padding = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  if (n < 0 || static_cast<std::size_t>(n) < padding) return std::nullopt;
  out.resize(static_cast<std::size_t>(n) - padding);
  return out;
}

}  // namespace sb
