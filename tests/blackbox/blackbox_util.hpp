#pragma once
// Shared helpers of the black-box tests: the test configuration, tool definitions, calls that the
// tests make over and over, and assertions on error bodies. Helpers that set a test up throw
// std::runtime_error when the server does not do what the setup needs; GoogleTest reports the
// exception (with the server's answer in it) as the test's failure.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fake_model_server.hpp"
#include "net_client.hpp"
#include "server_process.hpp"
#include "test_services.hpp"

namespace sb::test {

using Clock = std::chrono::steady_clock;

inline std::string str(const json::value& v) {
  return json::serialize(v);
}

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// The value at a JSON Pointer, or nullptr.
inline const json::value* find(const json::value& v, std::string_view pointer) {
  boost::system::error_code ec;
  return v.find_pointer(pointer, ec);
}

// The string at a JSON Pointer, or "" (for concise expectations on fields that must be strings).
inline std::string string_at(const json::value& v, std::string_view pointer) {
  const json::value* p = find(v, pointer);
  return p && p->is_string() ? std::string(p->get_string()) : std::string();
}

// The text of the text parts of a {info, parts} message.
inline std::string text_of(const json::value& message) {
  std::string out;
  if (const auto* parts = find(message, "/parts"); parts && parts->is_array())
    for (const auto& p : parts->get_array())
      if (string_at(p, "/type") == "text") out += string_at(p, "/text");
  return out;
}

// The tool part of the call `call_id` in a list of {info, parts} messages.
inline std::optional<json::object> tool_part(const json::array& messages,
                                             std::string_view call_id) {
  for (const auto& m : messages)
    if (const auto* parts = find(m, "/parts"); parts && parts->is_array())
      for (const auto& p : parts->get_array())
        if (string_at(p, "/type") == "tool" && string_at(p, "/callID") == call_id)
          return p.get_object();
  return std::nullopt;
}

// Polls `done` every 10 ms until it holds or the timeout passes; for state that has no event.
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return done();
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// The whole of a file ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Whether `pid` runs: a zombie (ended, waiting to be reaped) does not, nor does a pid that is gone.
inline bool process_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' &&
         line[close + 2] != 'X';
}

// Short timeouts everywhere, no rate limit, no reconnect grace; tests override what they test.
// Client tokens are off: these tests are about the tool flow and act as many clients at once;
// security_test.cpp tests the tokens (on by default) and turns them back on.
inline json::object test_config(const json::object& client_tools = {},
                                const json::object& server = {}) {
  json::object ct{{"defaultTimeout", 5000}, {"maxTimeout", 20000}, {"keepaliveInterval", 1000},
                  {"reconnectGrace", 0},    {"rateLimit", 0},      {"clientTokens", false}};
  for (const auto& kv : client_tools)
    ct[kv.key()] = kv.value();
  json::object sv;
  for (const auto& kv : server)
    sv[kv.key()] = kv.value();
  json::object cfg{{"clientTools", ct}};
  if (!sv.empty()) cfg["server"] = sv;
  return cfg;
}

// `config` with the fake model as the OpenAI-compatible provider "fake" (the default model,
// fake/fake-model) and fast retries.
inline json::object with_fake_model(json::object config, const FakeModelServer& model) {
  config["provider"] = json::object{{"fake", json::object{{"type", "openai-compatible"},
                                                          {"baseURL", model.base_url()},
                                                          {"apiKey", "sk-test"},
                                                          {"models", json::array{"fake-model"}}}}};
  config["model"] = "fake/fake-model";
  config["retry"] = json::object{{"attempts", 2}, {"initialDelay", 20}, {"maxDelay", 40}};
  return config;
}

// {"type": "object", "properties": {"text": {"type": "string"}}}
inline json::value text_schema() {
  return json::object{{"type", "object"},
                      {"properties", json::object{{"text", json::object{{"type", "string"}}}}}};
}

// A tool definition as a client registers it.
inline json::object tool_def(std::string_view name, std::string_view description = "a test tool",
                             json::value parameters = text_schema()) {
  return json::object{{"id", name}, {"description", description}, {"parameters", parameters}};
}

// POST /client-tools/register; throws unless it answers 200.
inline json::value register_tools(unsigned short port, std::string_view client_id,
                                  json::array tools) {
  auto res = http_post(port, "/client-tools/register",
                       json::object{{"clientID", client_id}, {"tools", std::move(tools)}});
  if (res.status != 200)
    throw std::runtime_error("setup: register for " + std::string(client_id) +
                             " failed: " + res.describe());
  return res.json();
}

// The bytes of a WebSocket upgrade request for `target`, for a RawConnection (a client that
// does what no WebSocket library would). `extra_headers`: whole lines, each ending in CRLF.
inline std::string ws_upgrade_request(std::string_view target,
                                      std::string_view extra_headers = {}) {
  return "GET " + std::string(target) +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
         std::string(extra_headers) + "\r\n";
}

// Starts POST /client-tools/execute on its own thread. The HTTP timeout is generous: the server's
// own timeouts are what the tests measure.
inline std::future<HttpResponse> execute_async(unsigned short port, json::object body,
                                               std::chrono::milliseconds http_timeout = 15s) {
  return std::async(std::launch::async, [port, body = std::move(body), http_timeout] {
    return http_post(port, "/client-tools/execute", body, http_timeout);
  });
}

// Waits for an execute started with execute_async; throws when it does not finish in time.
inline HttpResponse await(std::future<HttpResponse>& f, std::chrono::milliseconds timeout = 12s) {
  if (f.wait_for(timeout) != std::future_status::ready)
    throw std::runtime_error("execute did not answer within " + std::to_string(timeout.count()) +
                             " ms");
  return f.get();
}

// The data of the next `tool-request` event on a client's pending stream; throws if none comes.
inline json::object next_tool_request(SseClient& sse, std::chrono::milliseconds timeout = 5s) {
  auto e = sse.next_event_named("tool-request", timeout);
  if (!e)
    throw std::runtime_error("no tool-request event within " + std::to_string(timeout.count()) +
                             " ms");
  json::value v = e->json();
  if (!v.is_object()) throw std::runtime_error("tool-request data is not an object: " + e->data);
  return v.get_object();
}

// The `request` of the next {type: "request"} WebSocket message; throws if none comes.
inline json::object next_ws_request(WsClient& ws, std::chrono::milliseconds timeout = 5s) {
  auto m = ws.next_message_of_type("request", timeout);
  if (!m)
    throw std::runtime_error("no request message within " + std::to_string(timeout.count()) +
                             " ms");
  const json::value* r = find(*m, "/request");
  if (!r || !r->is_object())
    throw std::runtime_error("request message without request: " + str(*m));
  return r->get_object();
}

// Reads /event and finds events by type.
class BusEvents {
 public:
  explicit BusEvents(unsigned short port, SseClient::Options options = {})
      : sse_(port, "/event", std::move(options)) {}
  SseClient& sse() { return sse_; }

  // The next event of `type` (others before it are skipped), as {type, properties}.
  std::optional<json::object> next(std::string_view type, std::chrono::milliseconds timeout = 5s) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto e = sse_.next_event(left);
      if (!e) return std::nullopt;
      json::value v = e->json();
      if (v.is_object() && string_at(v, "/type") == type) return v.get_object();
    }
  }

  // Like next(), but also requires properties.<key> == value.
  std::optional<json::object> next_where(std::string_view type, std::string_view pointer,
                                         const json::value& value,
                                         std::chrono::milliseconds timeout = 5s) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto e = next(type, left);
      if (!e) return std::nullopt;
      json::value event(std::move(*e));
      const json::value* got = find(event, pointer);
      if (got && *got == value) return event.get_object();
    }
  }

  // Every event until `sid` is idle, in order, the session.idle last. Throws on timeout.
  std::vector<json::object> until_idle(const std::string& sid,
                                       std::chrono::milliseconds timeout = 10s) {
    std::vector<json::object> out;
    auto deadline = Clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto e = left.count() > 0 ? sse_.next_event(left) : std::nullopt;
      if (!e)
        throw std::runtime_error("session " + sid + " did not become idle within " +
                                 std::to_string(timeout.count()) + " ms");
      json::value v = e->json();
      if (!v.is_object()) continue;
      out.push_back(v.get_object());
      if (string_at(v, "/type") == "session.idle" && string_at(v, "/properties/sessionID") == sid)
        return out;
    }
  }

 private:
  SseClient sse_;
};

// Checks an error answer: status, the documented code, a JSON error body, and (when given) that
// the message contains each of `needles`.
inline testing::AssertionResult IsError(const HttpResponse& res, unsigned status,
                                        std::string_view code,
                                        std::initializer_list<std::string_view> needles = {}) {
  if (res.status != status)
    return testing::AssertionFailure()
           << "expected status " << status << ", got " << res.describe();
  if (res.error_code() != code)
    return testing::AssertionFailure()
           << "expected error.code " << code << ", got " << res.describe();
  std::string message = res.error_message();
  if (message.empty())
    return testing::AssertionFailure() << "error.message is missing or empty: " << res.describe();
  for (auto needle : needles)
    if (message.find(needle) == std::string::npos)
      return testing::AssertionFailure()
             << "error.message does not mention \"" << needle << "\": " << res.describe();
  return testing::AssertionSuccess();
}

// Checks a 200 answer whose body is JSON.
inline testing::AssertionResult IsOk(const HttpResponse& res) {
  if (res.status != 200)
    return testing::AssertionFailure() << "expected 200, got " << res.describe();
  boost::system::error_code ec;
  json::parse(res.body, ec);
  if (ec) return testing::AssertionFailure() << "200 without a JSON body: " << res.describe();
  return testing::AssertionSuccess();
}

// Runs one server per test. At the end of every test the server must shut down cleanly on
// SIGTERM (exit code 0) with no sanitizer report in its log; a failing test prints the log.
class ServerTest : public testing::Test {
 protected:
  void TearDown() override {
    if (!server_) return;
    server_->send_signal(SIGTERM);
    auto status = server_->wait_exit(10s);
    EXPECT_TRUE(status && status->exited && status->code == 0)
        << "the server did not shut down cleanly on SIGTERM: "
        << (status ? status->describe() : "still running 10 s later");
    std::string log = server_->log();
    // "API doc check": an answer that its OpenAPI document (GET /doc) does not describe.
    for (const char* report : {"AddressSanitizer", "LeakSanitizer", "ThreadSanitizer",
                               "runtime error:", "API doc check"})
      EXPECT_EQ(log.find(report), std::string::npos)
          << "the server's log contains a " << report << " report";
    if (HasFailure()) std::cerr << "--- switchboard log ---\n" << log << "--- end of log ---\n";
  }
  // Waits for the server to end; success when it exited with code 0.
  testing::AssertionResult exits_zero(std::chrono::milliseconds timeout = 10s) {
    auto status = server_->wait_exit(timeout);
    if (status && status->exited && status->code == 0) return testing::AssertionSuccess();
    return testing::AssertionFailure() << (status ? status->describe() : "still running");
  }
  void start(json::object config) { server_.emplace(std::move(config)); }
  unsigned short port() const { return server_->port(); }
  ServerProcess& server() { return *server_; }

  std::optional<ServerProcess> server_;
};

}  // namespace sb::test
