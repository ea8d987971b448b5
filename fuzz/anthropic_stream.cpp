// The Anthropic Messages stream parser: bytes from Anthropic's API or a proxy of it.
#include "model_stream.hpp"
#include "provider/anthropic.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sb::fuzz::check_stream<sb::provider::AnthropicStreamParser>(data, size);
}
