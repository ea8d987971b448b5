#pragma once
// Expected failures as values. The core returns Result<T>; the HTTP edge maps ErrorCode to a status
// in exactly one place (server/routes.cpp: http_status()).
#include <boost/system/result.hpp>

#include <string>
#include <string_view>

namespace sb {

enum class ErrorCode {
  InvalidRequest,  // 400
  Unauthorized,    // 401: no or wrong server password / client token
  Forbidden,       // 403
  NotFound,        // 404
  Conflict,        // 409
  TooLarge,        // 413
  RateLimited,     // 429
  Internal,        // 500
  Unavailable,     // 503: the client went away, the tool was unregistered, the server is stopping
  Timeout,         // 504
};

// The wire name of a code, e.g. "INVALID_REQUEST".
std::string_view error_code_name(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

// boost::system::result needs to know how to "throw" an Error from value() on an error result.
[[noreturn]] void throw_exception_from_error(const Error& e, const boost::source_location& loc);

template <class T>
using Result = boost::system::result<T, Error>;

inline Error make_error(ErrorCode code, std::string message) {
  return {code, std::move(message)};
}

}  // namespace sb
