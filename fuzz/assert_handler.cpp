// Boost's assertion handler for the fuzz build (BOOST_ENABLE_ASSERT_HANDLER, CMakeLists.txt): every
// failed assertion aborts, as without the handler, except one that is wrong in Boost 1.81.
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace boost {

void assertion_failed(char const* expr, char const* function, char const* file, long line) {
  // Beast 1.81's chunk-header parser asserts `n >= 5` where 3 or 4 buffered bytes are valid: a
  // chunked body's "0\r\n" read before its final CRLF. The code after the assertion asks for more
  // bytes, which is right; upstream removed the assertion (boostorg/beast pull request 2861).
  // Which bytes a read returns depends on timing, so the fuzzer hit it now and then.
  if (std::string_view(expr) == "n >= 5" && std::string_view(file).ends_with("basic_parser.ipp"))
    return;
  std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed.\n", file, line, function, expr);
  std::abort();
}

void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file,
                          long line) {
  std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed: %s\n", file, line, function, expr, msg);
  std::abort();
}

}  // namespace boost
