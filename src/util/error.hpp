#pragma once
// Expected failures as values. The core returns Result<T>; the HTTP edge maps ErrorCode to a status
// in exactly one place (server/routes.cpp: http_status()).
#include <boost/system/result.hpp>

#include <chrono>
#include <optional>
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
  // RateLimited: when a retry can succeed (the HTTP edge sends it as Retry-After).
  std::optional<std::chrono::seconds> retry_after = {};
};

// boost::system::result needs to know how to "throw" an Error from value() on an error result.
[[noreturn]] void throw_exception_from_error(const Error& e, const boost::source_location& loc);

// Dereferencing a Result that holds an error is a bug. boost::system::result's operator-> gives
// a null pointer then (and operator* asserts in debug builds only), so one unchecked
// `get_string(o, "x")->value_or("")` on a wrong-typed field was a segfault. This says which
// error was dereferenced: debug builds stop there (a test or fuzzer shows the bug), release
// builds throw, which the HTTP edge answers with a 500 and the server lives on.
[[noreturn]] void dereferenced_error(const Error& e);

// Result<T>: boost::system::result<T, Error> with checked dereference. Not thread-safe (a value).
template <class T>
class Result : public boost::system::result<T, Error> {
  using Base = boost::system::result<T, Error>;

 public:
  using Base::Base;

  T* operator->() {
    check();
    return Base::operator->();
  }
  const T* operator->() const {
    check();
    return Base::operator->();
  }
  T& operator*() & { return *operator->(); }
  const T& operator*() const& { return *operator->(); }
  // By value, as boost's: `for (auto& x : *f())` must not refer into a destroyed temporary.
  T operator*() && { return std::move(*operator->()); }

 private:
  void check() const {
    if (!this->has_value()) [[unlikely]]
      dereferenced_error(this->error());
  }
};

template <>
class Result<void> : public boost::system::result<void, Error> {
  using Base = boost::system::result<void, Error>;

 public:
  using Base::Base;
};

inline Error make_error(ErrorCode code, std::string message) {
  return {code, std::move(message)};
}

}  // namespace sb
