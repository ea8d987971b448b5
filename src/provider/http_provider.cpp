// OpenAI-compatible and Anthropic providers over HTTP(S): the request builders and stream
// parsers of openai.cpp / anthropic.cpp, on the outbound client of net/.
#include <boost/asio/this_coro.hpp>

#include "net/http_client.hpp"
#include "provider/anthropic.hpp"
#include "provider/openai.hpp"
#include "provider/provider.hpp"

namespace sb::provider {
namespace {

// The provider's own words for a refused request: {"error": {"message": ...}} in both APIs.
std::string error_message_from_body(const std::string& body) {
  auto doc = parse_json(body);
  if (doc && doc->is_object()) {
    const auto& o = doc->get_object();
    if (auto e = o.find("error"); e != o.end()) {
      if (e->value().is_object()) {
        const auto& eo = e->value().get_object();
        if (auto m = eo.find("message"); m != eo.end() && m->value().is_string())
          return std::string(m->value().get_string());
      }
      if (e->value().is_string()) return std::string(e->value().get_string());
    }
    if (auto m = o.find("message"); m != o.end() && m->value().is_string())
      return std::string(m->value().get_string());
  }
  return body.substr(0, 500);
}

class HttpProvider final : public ModelProvider {
 public:
  explicit HttpProvider(HttpProviderOptions o) : o_(std::move(o)) {
    while (!o_.base_url.empty() && o_.base_url.back() == '/')
      o_.base_url.pop_back();
  }
  const std::string& id() const override { return o_.id; }
  std::string type() const override { return o_.type; }
  std::string base_url() const override { return o_.base_url; }
  std::vector<std::string> models() const override { return o_.models; }
  InputKinds input() const override { return o_.input; }

  boost::asio::awaitable<void> stream(const ModelRequest& request, EventHandler on_event,
                                      std::shared_ptr<AbortSignal> abort) override {
    bool anthropic = o_.type == "anthropic";
    net::HttpRequestSpec spec;
    spec.abort = abort;
    spec.keep_alive = true;  // every step goes to the same server: keep its connections
    spec.headers.emplace_back("content-type", "application/json");
    spec.headers.emplace_back("accept", "text/event-stream");
    if (anthropic) {
      spec.url = o_.base_url + "/messages";
      spec.body = serialize_anthropic_request(request);
      if (!o_.api_key.empty()) spec.headers.emplace_back("x-api-key", o_.api_key);
      spec.headers.emplace_back("anthropic-version", std::string(kAnthropicVersion));
    } else {
      spec.url = o_.base_url + "/chat/completions";
      spec.body = serialize_openai_request(request);
      if (!o_.api_key.empty()) spec.headers.emplace_back("authorization", "Bearer " + o_.api_key);
    }
    for (const auto& [k, v] : o_.headers)
      spec.headers.emplace_back(k, v);

    std::unique_ptr<StreamParser> parser;
    if (anthropic)
      parser = std::make_unique<AnthropicStreamParser>();
    else
      parser = std::make_unique<OpenAIStreamParser>();
    int status = 0;
    std::string error_body;
    std::vector<StreamEvent> events;
    auto result = co_await net::fetch_streaming(
        std::move(spec), [&](const net::HttpResponseHead& head) { status = head.status; },
        [&](std::string_view bytes) {
          if (status != 200) {
            if (error_body.size() < 64 * 1024) error_body.append(bytes);
            return;
          }
          if (parser->done()) return;
          parser->feed(bytes, events);
          for (auto& e : events)
            on_event(std::move(e));
          events.clear();
        });
    if (abort && abort->aborted()) {
      if (!parser->done()) on_event(StreamError{"aborted", false, 0});
      co_return;
    }
    if (!result) {
      // DNS, connect, TLS, a stream cut off, a silent server: worth another try.
      if (!parser->done()) on_event(StreamError{o_.id + ": " + result.error().message, true, 0});
      co_return;
    }
    if (status != 200) {
      bool retryable = status == 408 || status == 409 || status == 429 || status >= 500;
      std::string message = o_.id + " answered HTTP " + std::to_string(status) + ": " +
                            error_message_from_body(error_body);
      if ((status == 401 || status == 403) && o_.api_key.empty() && !o_.missing_key.empty())
        message += " (" + o_.missing_key + ")";
      on_event(StreamError{std::move(message), retryable, status});
      co_return;
    }
    parser->finish(events);
    for (auto& e : events)
      on_event(std::move(e));
  }

 private:
  HttpProviderOptions o_;
};

}  // namespace

ProviderPtr make_http_provider(HttpProviderOptions options) {
  return std::make_shared<HttpProvider>(std::move(options));
}

}  // namespace sb::provider
