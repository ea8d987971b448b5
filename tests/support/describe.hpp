#pragma once
// Test and benchmark support: what an exception that ended a coroutine or a thread says.
#include <exception>
#include <string>

namespace sb::test {

// what() of a std::exception, else "unknown exception".
inline std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace sb::test
