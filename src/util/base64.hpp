#pragma once
// Base64 (RFC 4648: the standard alphabet, with padding), by OpenSSL's EVP_EncodeBlock and
// EVP_DecodeBlock. Pure functions; thread-safe.
#include <optional>
#include <string>
#include <string_view>

namespace sb {

// `bytes` as base64, for data: URLs ("foo" -> "Zm9v", "f" -> "Zg==").
std::string base64_encode(std::string_view bytes);

// The bytes that base64 `text` stands for ("" for ""), or nullopt when it is not base64 (a
// length that is not a multiple of 4, a character outside the alphabet) or longer than 2 GiB.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace sb
