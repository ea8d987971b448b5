// Tests of the webfetch tool against a real HTTP server on loopback: a small Beast server in a
// thread of its own serves canned responses (pages, redirect chains, errors, a huge body, a slow
// answer), and the tests check what the model would read and what the person approving saw.
#include "tool/builtin/webfetch.hpp"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "tool/tool_test_helpers.hpp"

namespace sb::tool {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using namespace sb::tool::testing;

struct Canned {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds delay{0};  // before the response is sent
};

// An HTTP/1.1 server on 127.0.0.1 with a fixed route table, one request per connection. Runs its
// own io_context on its own thread, so a test's client never shares a thread with it, and a
// pending slow answer does not keep the test's io_context alive.
class LocalHttpServer {
 public:
  explicit LocalHttpServer(std::map<std::string, Canned> routes)
      : routes_(std::move(routes)),
        acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~LocalHttpServer() {
    io_.stop();
    thread_.join();
  }

  std::string url(std::string_view path) const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) +
           std::string(path);
  }
  int hits() const { return hits_; }
  std::string last_header(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = last_headers_.find(name);
    return it == last_headers_.end() ? "" : it->second;
  }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    http::request<http::string_body> request;
    auto [ec, n] =
        co_await http::async_read(socket, buffer, request, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    ++hits_;
    {
      std::lock_guard lock(mutex_);
      last_headers_.clear();
      for (const auto& f : request)
        last_headers_[std::string(f.name_string())] = std::string(f.value());
    }
    std::string target(request.target());
    Canned canned{404, {{"Content-Type", "text/plain"}}, "no route " + target};
    if (auto it = routes_.find(target); it != routes_.end()) {
      canned = it->second;
    } else if (target.rfind("/hop/", 0) == 0) {
      // /hop/N redirects N times before it answers.
      int left = std::stoi(target.substr(5));
      if (left == 0)
        canned = Canned{200, {{"Content-Type", "text/plain"}}, "arrived"};
      else
        canned = Canned{302, {{"Location", "/hop/" + std::to_string(left - 1)}}, ""};
    }
    if (canned.delay.count() > 0) {
      asio::steady_timer timer(io_, canned.delay);
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    http::response<http::string_body> response{static_cast<http::status>(canned.status), 11};
    for (const auto& [k, v] : canned.headers)
      response.set(k, v);
    response.body() = canned.body;
    response.keep_alive(false);
    response.prepare_payload();
    co_await http::async_write(socket, response, asio::as_tuple(asio::use_awaitable));
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
  }

  std::map<std::string, Canned> routes_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<int> hits_{0};
  mutable std::mutex mutex_;
  std::map<std::string, std::string> last_headers_;
};

const char* kPage = R"(<!DOCTYPE html>
<html><head><title>Welcome page</title><style>h1 { color: red }</style>
<script>window.tracking = "do not show";</script></head>
<body><h1>Welcome</h1>
<p>Read the <a href="/docs/intro">introduction</a> first.</p>
<ul><li>alpha</li><li>beta</li></ul>
<pre><code class="language-sh">make &amp;&amp; make test</code></pre>
<script>console.log("nope")</script></body></html>)";

std::map<std::string, Canned> routes() {
  std::string png("\x89PNG\r\n\x1a\n\0\0", 10);
  return {
      {"/page", {200, {{"Content-Type", "text/html; charset=utf-8"}}, kPage}},
      {"/text", {200, {{"Content-Type", "text/plain"}}, "hello plain\n  spaces   kept\n"}},
      {"/json", {200, {{"Content-Type", "application/json"}}, R"({"a": [1, 2]})"}},
      {"/missing", {404, {{"Content-Type", "text/html"}}, "<h1>Not here</h1>"}},
      {"/broken", {503, {{"Content-Type", "text/plain"}}, "down"}},
      {"/huge", {200, {{"Content-Type", "text/plain"}}, std::string(6 * 1024 * 1024, 'x')}},
      {"/slow", {200, {{"Content-Type", "text/plain"}}, "late", 3000ms}},
      {"/image.png", {200, {{"Content-Type", "image/png"}}, png}},
      {"/blob", {200, {{"Content-Type", "application/octet-stream"}}, std::string("a\0b", 3)}},
      {"/pdf", {200, {{"Content-Type", "application/pdf"}}, "%PDF-1.4 ..."}},
      {"/latin1", {200, {{"Content-Type", "text/plain; charset=ISO-8859-1"}}, "caf\xE9"}},
      {"/latin1.html",
       {200, {{"Content-Type", "text/html; charset=\"iso-8859-1\""}}, "<p>na\xEFve</p>"}},
      {"/untyped", {200, {}, "<!doctype html><p>sniffed <b>html</b></p>"}},
      {"/spa",
       {200,
        {{"Content-Type", "text/html"}},
        "<html><body><div id=app></div><script>render()</script></body></html>"}},
  };
}

class WebFetchTest : public ::testing::Test {
 protected:
  Result<ToolResult> fetch(std::string_view json_args) { return fetch_with(tool_, json_args); }
  Result<ToolResult> fetch_with(const ToolPtr& tool, std::string_view json_args) {
    auto ctx = context(asks_);
    return run_io(tool->execute(args(json_args), ctx));
  }
  std::string url_arg(std::string_view path) const {
    return "\"url\": \"" + server_.url(path) + "\"";
  }

  LocalHttpServer server_{routes()};
  ToolPtr tool_ = make_webfetch_tool();
  Asks asks_;
};

TEST_F(WebFetchTest, SchemaAndDescription) {
  EXPECT_EQ(tool_->id(), "webfetch");
  const auto& props = tool_->parameters().at("properties").as_object();
  EXPECT_TRUE(props.contains("url"));
  EXPECT_TRUE(props.contains("format"));
  EXPECT_TRUE(props.contains("timeout"));
  EXPECT_EQ(tool_->parameters().at("required").as_array().size(), 1u);
  EXPECT_TRUE(Contains(tool_->description(), "markdown"));
}

TEST_F(WebFetchTest, HtmlPageBecomesMarkdown) {
  auto r = fetch("{" + url_arg("/page") + "}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "# Welcome"));
  EXPECT_TRUE(Contains(r->output, "[introduction](" + server_.url("/docs/intro") + ")"));
  EXPECT_TRUE(Contains(r->output, "- alpha\n- beta"));
  EXPECT_TRUE(Contains(r->output, "```sh\nmake && make test\n```"));
  EXPECT_FALSE(Contains(r->output, "tracking"));
  EXPECT_FALSE(Contains(r->output, "nope"));
  EXPECT_FALSE(Contains(r->output, "color: red"));
  EXPECT_EQ(r->title, server_.url("/page") + " (text/html; charset=utf-8)");
  EXPECT_EQ(r->metadata.at("status"), 200);
  EXPECT_TRUE(Contains(server_.last_header("Accept"), "text/markdown;q=1.0"));
  // The person approving saw the URL.
  ASSERT_EQ(asks_.requests.size(), 1u);
  EXPECT_EQ(asks_.requests[0].permission, "webfetch");
  EXPECT_EQ(asks_.requests[0].patterns, std::vector<std::string>{server_.url("/page")});
  EXPECT_EQ(asks_.requests[0].metadata.at("format"), "markdown");
}

TEST_F(WebFetchTest, HtmlPageAsTextAndAsHtml) {
  auto text = fetch("{" + url_arg("/page") + ", \"format\": \"text\"}");
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(text->output,
            "Welcome\n\nRead the introduction first.\n\nalpha\nbeta\n\nmake && make test");
  EXPECT_TRUE(Contains(server_.last_header("Accept"), "text/plain;q=1.0"));

  auto html = fetch("{" + url_arg("/page") + ", \"format\": \"html\"}");
  ASSERT_TRUE(html) << html.error().message;
  EXPECT_EQ(html->output, kPage);
}

TEST_F(WebFetchTest, NonHtmlTextIsReturnedAsIs) {
  for (std::string format : {"markdown", "text", "html"}) {
    auto r = fetch("{" + url_arg("/text") + ", \"format\": \"" + format + "\"}");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->output, "hello plain\n  spaces   kept\n") << format;
    EXPECT_EQ(r->title, server_.url("/text") + " (text/plain)");
  }
  auto json = fetch("{" + url_arg("/json") + "}");
  ASSERT_TRUE(json) << json.error().message;
  EXPECT_EQ(json->output, R"({"a": [1, 2]})");
}

TEST_F(WebFetchTest, FollowsUpToFiveRedirects) {
  auto r = fetch("{" + url_arg("/hop/5") + "}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "arrived");
  EXPECT_EQ(std::string(r->metadata.at("finalUrl").as_string()), server_.url("/hop/0"));
  EXPECT_EQ(r->title, server_.url("/hop/5") + " (text/plain)");

  auto too_many = fetch("{" + url_arg("/hop/6") + "}");
  ASSERT_FALSE(too_many);
  EXPECT_TRUE(Contains(too_many.error().message, "Too many redirects (more than 5)"));
}

TEST_F(WebFetchTest, ErrorStatusesAreErrors) {
  auto missing = fetch("{" + url_arg("/missing") + "}");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);
  EXPECT_TRUE(Contains(missing.error().message, "Request failed with status code 404"));
  auto broken = fetch("{" + url_arg("/broken") + "}");
  ASSERT_FALSE(broken);
  EXPECT_TRUE(Contains(broken.error().message, "status code 503"));
}

TEST_F(WebFetchTest, ResponseOverTheLimitIsRefused) {
  auto r = fetch("{" + url_arg("/huge") + "}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::TooLarge);
  EXPECT_TRUE(Contains(r.error().message, "Response too large (exceeds the 5 MiB limit)"));

  // Exactly at the limit is fine, one byte over is not.
  WebFetchOptions small;
  small.max_response_bytes = 11;
  auto fits = fetch_with(make_webfetch_tool(small), "{" + url_arg("/text") + "}");
  EXPECT_FALSE(fits);  // the body is 28 bytes
  small.max_response_bytes = 28;
  fits = fetch_with(make_webfetch_tool(small), "{" + url_arg("/text") + "}");
  EXPECT_TRUE(fits) << fits.error().message;
  small.max_response_bytes = 27;
  fits = fetch_with(make_webfetch_tool(small), "{" + url_arg("/text") + "}");
  ASSERT_FALSE(fits);
  EXPECT_EQ(fits.error().code, ErrorCode::TooLarge);
}

TEST_F(WebFetchTest, TimeoutCoversTheWholeRequest) {
  auto start = std::chrono::steady_clock::now();
  auto r = fetch("{" + url_arg("/slow") + ", \"timeout\": 0.5}");
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(r.error().message, "timed out after 500 ms"));
  EXPECT_LT(elapsed, 2500ms);
  EXPECT_GE(elapsed, 450ms);
}

TEST_F(WebFetchTest, TimeoutIsCappedAt120Seconds) {
  auto r = fetch("{" + url_arg("/text") + ", \"timeout\": 1000}");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(asks_.requests.size(), 1u);
  EXPECT_EQ(asks_.requests[0].metadata.at("timeout").to_number<double>(), 120.0);
  auto bad = fetch("{" + url_arg("/text") + ", \"timeout\": 0}");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(Contains(bad.error().message, "positive"));
}

TEST_F(WebFetchTest, AbortEndsTheRequestAtOnce) {
  auto ctx = context(asks_);
  auto start = std::chrono::steady_clock::now();
  auto r = run_io(aborted_after(150ms, ctx.abort, "stopped by the user",
                                tool_->execute(args("{" + url_arg("/slow") + "}"), ctx)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "aborted");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
}

TEST_F(WebFetchTest, ImagesBecomeAttachments) {
  auto r = fetch("{" + url_arg("/image.png") + "}");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->attachments.size(), 1u);
  const auto& a = r->attachments[0].as_object();
  EXPECT_EQ(a.at("type"), "file");
  EXPECT_EQ(a.at("mime"), "image/png");
  EXPECT_EQ(a.at("url"), "data:image/png;base64,iVBORw0KGgoAAA==");
  EXPECT_EQ(a.at("filename"), "image.png");
  EXPECT_TRUE(Contains(r->output, "Image fetched successfully"));
}

TEST_F(WebFetchTest, BinaryContentIsAnError) {
  for (std::string path : {"/blob", "/pdf"}) {
    auto r = fetch("{" + url_arg(path) + "}");
    ASSERT_FALSE(r) << path;
    EXPECT_TRUE(Contains(r.error().message, "binary")) << path;
  }
}

TEST_F(WebFetchTest, DeclaredCharsetsAreConvertedToUtf8) {
  auto text = fetch("{" + url_arg("/latin1") + "}");
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(text->output, "caf\xC3\xA9");
  auto html = fetch("{" + url_arg("/latin1.html") + "}");
  ASSERT_TRUE(html) << html.error().message;
  EXPECT_EQ(html->output, "na\xC3\xAFve");
  auto raw = fetch("{" + url_arg("/latin1.html") + ", \"format\": \"html\"}");
  ASSERT_TRUE(raw) << raw.error().message;
  EXPECT_EQ(raw->output, "<p>na\xC3\xAFve</p>");
}

TEST_F(WebFetchTest, HtmlWithoutContentTypeIsRecognised) {
  auto r = fetch("{" + url_arg("/untyped") + "}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "sniffed **html**");
  EXPECT_EQ(r->title, server_.url("/untyped") + " (unknown type)");
}

TEST_F(WebFetchTest, PageWithoutTextSaysSo) {
  auto r = fetch("{" + url_arg("/spa") + "}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "no visible text"));
  EXPECT_TRUE(Contains(r->output, "JavaScript"));
}

TEST_F(WebFetchTest, BadUrlsAreRefusedBeforeAsking) {
  for (std::string url : {"ftp://example.com/x", "example.com", "file:///etc/passwd", "http://"}) {
    auto r = fetch("{\"url\": \"" + url + "\"}");
    ASSERT_FALSE(r) << url;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest) << url;
  }
  EXPECT_TRUE(asks_.requests.empty());
  auto format = fetch("{" + url_arg("/text") + ", \"format\": \"pdf\"}");
  ASSERT_FALSE(format);
  EXPECT_TRUE(Contains(format.error().message, "format must be"));
  EXPECT_EQ(server_.hits(), 0);
}

TEST_F(WebFetchTest, DeniedPermissionFetchesNothing) {
  asks_.deny = {"webfetch"};
  auto r = fetch("{" + url_arg("/text") + "}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  EXPECT_EQ(server_.hits(), 0);
}

TEST_F(WebFetchTest, UnreachableServerIsAClearError) {
  // A port nobody listens on: bind one, then close it.
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto port = a.local_endpoint().port();
  a.close();
  auto r = fetch("{\"url\": \"http://127.0.0.1:" + std::to_string(port) + "/\"}");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "Failed to fetch"));
}

TEST(MediaType, Parse) {
  auto m = parse_media_type("Text/HTML; Charset=\"ISO-8859-1\"; q=1");
  EXPECT_EQ(m.type, "text/html");
  EXPECT_EQ(m.charset, "ISO-8859-1");
  EXPECT_EQ(parse_media_type("").type, "");
  EXPECT_EQ(parse_media_type("application/json").charset, "");
}

}  // namespace
}  // namespace sb::tool
