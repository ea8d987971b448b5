#pragma once
// An outbound HTTP/1.1 client for model providers and webfetch: http and https (TLS with the
// system's CA store and host name verification), a streamed response body, and a bound on every
// wait (connect; any silence while sending or reading) plus an abort signal.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/abort.hpp"
#include "util/error.hpp"

namespace sb::net {

// Idle keep-alive connections to plain-http origins, for a client that sends many requests to
// the same server (a model provider): a request takes one instead of connecting, and gives it
// back when the response ended cleanly and the server keeps the connection open. Holds bare
// descriptors, so a pool may outlive any io_context. Thread-safe. (https connects each time.)
class ConnectionPool {
 public:
  ConnectionPool() = default;
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  struct Idle {
    int fd = -1;
    bool v6 = false;
  };
  std::optional<Idle> take(const std::string& origin);
  void give_back(const std::string& origin, Idle connection);

 private:
  static constexpr std::size_t kMaxIdlePerOrigin = 32;
  std::mutex mutex_;
  std::multimap<std::string, Idle> idle_;
};

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
  std::shared_ptr<ConnectionPool> pool;           // none: a connection per request
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
