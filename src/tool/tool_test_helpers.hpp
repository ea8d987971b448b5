#pragma once
// Helpers shared by the tests of webfetch, batch and custom tools: run a coroutine to its end on
// a private io_context, build arguments from JSON text, record permission asks and progress.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tool/tool.hpp"

namespace sb {
inline void PrintTo(ErrorCode code, std::ostream* os) {
  *os << error_code_name(code);
}
}  // namespace sb

namespace sb::tool::testing {

template <class T>
T run_io(boost::asio::awaitable<T> task) {
  boost::asio::io_context io;
  std::optional<T> value;
  std::exception_ptr error;
  boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T v) {
    error = e;
    if (!e) value.emplace(std::move(v));
  });
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*value);
}

inline ::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text.substr(0, 3000) << "\"\ndoes not contain\n\"" << part << "\"";
}

inline json::object args(std::string_view text) {
  auto v = parse_json(text);
  if (!v || !v->is_object()) throw std::runtime_error("bad test args: " + std::string(text));
  return v->get_object();
}

// A permission system stand-in: records every ask; denies the permissions listed in `deny`.
struct Asks {
  std::vector<PermissionRequest> requests;
  std::vector<std::string> deny;
};

inline boost::asio::awaitable<Result<void>> record_ask(Asks* asks, PermissionRequest request) {
  std::string permission = request.permission;
  asks->requests.push_back(std::move(request));
  if (std::find(asks->deny.begin(), asks->deny.end(), permission) != asks->deny.end())
    co_return make_error(ErrorCode::Forbidden,
                         "The user has specifically denied the " + permission + " permission");
  co_return Result<void>{};
}

struct Reports {
  std::vector<std::optional<std::string>> titles;
  std::vector<json::object> metadata;
};

// A context for a session "ses_test" in `directory`, recording asks and progress reports.
inline ToolContext context(Asks& asks, Reports* reports = nullptr,
                           std::filesystem::path directory = {}) {
  ToolContext ctx;
  ctx.session_id = "ses_test";
  ctx.message_id = "msg_test";
  ctx.call_id = "call_1";
  ctx.agent = "build";
  ctx.directory = std::move(directory);
  ctx.ask = [a = &asks](PermissionRequest r) { return record_ask(a, std::move(r)); };
  if (reports)
    ctx.metadata = [reports](std::optional<std::string> title, json::object meta) {
      reports->titles.push_back(std::move(title));
      reports->metadata.push_back(std::move(meta));
    };
  return ctx;
}

}  // namespace sb::tool::testing
