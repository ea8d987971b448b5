#pragma once
// An outbound HTTP/1.1 client for model providers and webfetch: http and https (TLS with the
// system's CA store and host name verification), a streamed response body, and a bound on every
// wait (connect; any silence while sending or reading) plus an abort signal.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/abort.hpp"
#include "util/error.hpp"

namespace sb::net {

struct HttpRequestSpec {
  std::string method = "POST";
  std::string url;  // http:// or https://
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds connect_timeout{15000};
  std::chrono::milliseconds read_timeout{300000};  // longest silence while sending or reading
  std::shared_ptr<AbortSignal> abort;
  std::size_t max_body_bytes = 64 * 1024 * 1024;  // the stream ends with TooLarge past this
  int max_redirects = 0;                          // webfetch follows a few; providers none
  // Plain http only: take an idle connection to the origin if the io_context keeps one, and
  // keep this one after a response that ended cleanly (at most 32 idle per origin). A kept
  // connection the server has closed meanwhile fails before any answer; the request then goes
  // once more on a new connection. Off: a connection per request.
  bool keep_alive = false;
};

struct HttpResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(std::string_view name) const;  // case-insensitive, "" when absent
  std::string final_url;
};

// Sends the request and streams the response: `on_head` once, then `on_body` for each piece of
// the (de-chunked) body. Returns the head when the body ended normally. Errors: Unavailable
// (DNS, connect, TLS, reset), Timeout, TooLarge, Unavailable "aborted" when the signal fired.
boost::asio::awaitable<Result<HttpResponseHead>> fetch_streaming(
    HttpRequestSpec spec, std::function<void(const HttpResponseHead&)> on_head,
    std::function<void(std::string_view)> on_body);

// The same, collecting the body.
struct HttpResponse {
  HttpResponseHead head;
  std::string body;
};
boost::asio::awaitable<Result<HttpResponse>> fetch(HttpRequestSpec spec);

}  // namespace sb::net
