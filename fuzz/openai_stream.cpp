// The OpenAI Chat Completions stream parser: bytes from any OpenAI-compatible server.
#include "model_stream.hpp"
#include "provider/openai.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sb::fuzz::check_stream<sb::provider::OpenAIStreamParser>(data, size);
}
