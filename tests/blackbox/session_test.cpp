// Black-box tests of the session API and the agent loop (issue 3): the real `switchboard serve`
// against a fake OpenAI-compatible / Anthropic model server that the tests script. A turn with
// each built-in tool, client tools over WebSocket (plain, parallel with a server tool,
// interactive), permissions (ask, once, reject, always), the doom loop, abort, busy sessions,
// failing providers and cut streams, the `invalid` tool, restarts (a crash mid-turn and a clean
// stop), deletion, tool discovery, and the routes' validation.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "blackbox_util.hpp"
#include "fake_model_server.hpp"
#include "test_postgres.hpp"

namespace sb::test {
namespace {

namespace fs = std::filesystem;

long long elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

json::object text_prompt(std::string_view text) {
  return json::object{{"parts", json::array{json::object{{"type", "text"}, {"text", text}}}}};
}

// The value at a JSON Pointer, or null.
json::value value_at(const json::value& v, std::string_view pointer) {
  const json::value* p = find(v, pointer);
  return p ? *p : json::value(nullptr);
}

const json::object& as_object(const json::value& v) {
  static const json::object empty;
  return v.is_object() ? v.get_object() : empty;
}

// ---- what the model was sent ------------------------------------------------------------------

const json::array& array_at(const json::value& v, std::string_view pointer) {
  static const json::array empty;
  const json::value* p = find(v, pointer);
  return p && p->is_array() ? p->get_array() : empty;
}

// The names of the tools offered in an OpenAI request.
std::vector<std::string> openai_tool_names(const RecordedRequest& r) {
  std::vector<std::string> out;
  for (const auto& t : array_at(r.json, "/tools"))
    out.push_back(string_at(t, "/function/name"));
  return out;
}

// The function object of the tool named `name` in an OpenAI request, or null.
json::value openai_tool(const RecordedRequest& r, std::string_view name) {
  for (const auto& t : array_at(r.json, "/tools"))
    if (string_at(t, "/function/name") == name) return value_at(t, "/function");
  return nullptr;
}

// The {role: "tool"} message answering `call_id` in an OpenAI request, or null.
json::value openai_tool_message(const RecordedRequest& r, std::string_view call_id) {
  for (const auto& m : array_at(r.json, "/messages"))
    if (string_at(m, "/role") == "tool" && string_at(m, "/tool_call_id") == call_id) return m;
  return nullptr;
}

// The assistant message of an OpenAI request whose tool_calls include `call_id`, or null.
json::value openai_call_message(const RecordedRequest& r, std::string_view call_id) {
  for (const auto& m : array_at(r.json, "/messages"))
    for (const auto& c : array_at(m, "/tool_calls"))
      if (string_at(c, "/id") == call_id) return m;
  return nullptr;
}

// ---- what the session shows -------------------------------------------------------------------

std::vector<json::object> parts_of(const json::array& messages) {
  std::vector<json::object> out;
  for (const auto& m : messages)
    for (const auto& p : array_at(m, "/parts"))
      out.push_back(as_object(p));
  return out;
}

// The user contents of an OpenAI request's messages, in order.
std::vector<std::string> user_texts(const RecordedRequest& r) {
  std::vector<std::string> out;
  for (const auto& m : array_at(r.json, "/messages"))
    if (string_at(m, "/role") == "user") out.push_back(string_at(m, "/content"));
  return out;
}

class SessionTest : public ServerTest {
 protected:
  // A config with the fake model as the OpenAI-compatible provider "fake" (the default model),
  // fast retries and the test's own entries on top.
  json::object openai_config(const json::object& extra = {}) {
    json::object cfg = with_fake_model(test_config(), model_);
    for (const auto& kv : extra)
      cfg[kv.key()] = kv.value();
    return cfg;
  }

  // Starts the server with the test's project and data directories.
  void start_server(json::object config) {
    ServerProcess::Options options;
    options.config = std::move(config);
    options.data_dir = data_.path();
    options.directory = project_.path();
    server_.emplace(std::move(options));
  }

  std::string create_session(const json::object& body = {}) {
    auto res = http_post(port(), "/session", body);
    if (res.status != 200) throw std::runtime_error("setup: POST /session: " + res.describe());
    std::string id = string_at(res.json(), "/id");
    if (id.empty()) throw std::runtime_error("setup: POST /session without id: " + res.describe());
    return id;
  }

  HttpResponse prompt(const std::string& sid, std::string_view text,
                      std::chrono::milliseconds timeout = 15s) {
    return http_post(port(), "/session/" + sid + "/message", text_prompt(text), timeout);
  }

  void prompt_async(const std::string& sid, json::object body) {
    auto res = http_post(port(), "/session/" + sid + "/prompt_async", body);
    if (res.status != 204)
      throw std::runtime_error("setup: prompt_async did not answer 204: " + res.describe());
  }
  void prompt_async(const std::string& sid, std::string_view text) {
    prompt_async(sid, text_prompt(text));
  }

  json::array messages(const std::string& sid) {
    auto res = http_get(port(), "/session/" + sid + "/message");
    if (res.status != 200)
      throw std::runtime_error("GET /session/" + sid + "/message: " + res.describe());
    return res.json().as_array();
  }

  json::object status() { return http_get(port(), "/session/status").json().as_object(); }

  // A WebSocket client c1 with `tools` registered for `sid`.
  std::unique_ptr<WsClient> connect_client(const std::string& sid, json::array tools) {
    auto ws = std::make_unique<WsClient>(port(), "/client-tools/ws/c1");
    ws->send_json(json::object{{"type", "register"}, {"sessionID", sid}, {"tools", tools}});
    auto registered = ws->next_message_of_type("registered", 5s);
    if (!registered) throw std::runtime_error("setup: no registered message");
    return ws;
  }

  void wait_idle(BusEvents& bus, const std::string& sid, std::chrono::milliseconds timeout = 10s) {
    if (!bus.next_where("session.idle", "/properties/sessionID", json::value(sid), timeout))
      throw std::runtime_error("session " + sid + " did not become idle within " +
                               std::to_string(timeout.count()) + " ms");
  }

  // Waits for a part update of `call_id` with the given status; the part.
  std::optional<json::object> wait_part_status(BusEvents& bus, std::string_view call_id,
                                               std::string_view status,
                                               std::chrono::milliseconds timeout = 5s) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto e = bus.next("message.part.updated", left);
      if (!e) return std::nullopt;
      json::value v(std::move(*e));
      if (string_at(v, "/properties/part/callID") == call_id &&
          string_at(v, "/properties/part/state/status") == status)
        return as_object(value_at(v, "/properties/part"));
    }
  }

  // A turn in which the model calls `tool` with `input` once and then answers "All done.".
  struct ToolTurn {
    std::string session;
    std::string call_id;
    HttpResponse reply;      // POST /session/{id}/message
    json::object part;       // the tool part, from GET /session/{id}/message
    RecordedRequest first;   // the model request that led to the call
    RecordedRequest second;  // the one after it, with the result
  };
  ToolTurn tool_turn(const std::string& tool, const json::value& input) {
    ToolTurn t;
    t.call_id = "call_" + tool + "_1";
    model_.push(FakeResponse::with_tool_call(t.call_id, tool, input));
    model_.push(FakeResponse::with_text("All done."));
    t.session = create_session();
    t.reply = prompt(t.session, "please use " + tool);
    auto first = model_.wait_for_request(0, 1s);
    auto second = model_.wait_for_request(1, 1s);
    if (!first || !second)
      throw std::runtime_error("the model got " + std::to_string(model_.request_count()) +
                               " requests, not 2; the reply was " + t.reply.describe());
    t.first = std::move(*first);
    t.second = std::move(*second);
    auto part = tool_part(messages(t.session), t.call_id);
    if (!part) throw std::runtime_error("no tool part with callID " + t.call_id);
    t.part = std::move(*part);
    return t;
  }

  // What every successful tool turn shows: the tool was offered with its schema, its part
  // completed, the model got exactly the part's output back for that call id, and the turn
  // ended with the model's text.
  void expect_tool_turn_completed(const ToolTurn& t, std::string_view tool) {
    json::value part(t.part);
    EXPECT_EQ(string_at(part, "/tool"), tool) << str(part);
    EXPECT_EQ(string_at(part, "/state/status"), "completed") << str(part);
    std::string output = string_at(part, "/state/output");
    EXPECT_FALSE(output.empty()) << str(part);

    json::value offered = openai_tool(t.first, tool);
    EXPECT_TRUE(offered.is_object()) << tool << " was not offered to the model: " << t.first.body;
    EXPECT_EQ(string_at(offered, "/parameters/type"), "object") << str(offered);
    EXPECT_FALSE(string_at(offered, "/description").empty()) << str(offered);
    const json::array& sent = array_at(t.first.json, "/messages");
    ASSERT_FALSE(sent.empty()) << t.first.body;
    EXPECT_EQ(string_at(sent.back(), "/role"), "user") << t.first.body;
    EXPECT_EQ(string_at(sent.back(), "/content"), "please use " + std::string(tool));

    json::value call = openai_call_message(t.second, t.call_id);
    EXPECT_TRUE(call.is_object()) << "the second request does not repeat the call: "
                                  << t.second.body;
    json::value result = openai_tool_message(t.second, t.call_id);
    ASSERT_TRUE(result.is_object())
        << "the tool result was not sent back to the model: " << t.second.body;
    EXPECT_EQ(string_at(result, "/content"), output);

    ASSERT_TRUE(IsOk(t.reply));
    json::value reply = t.reply.json();
    EXPECT_EQ(text_of(reply), "All done.") << t.reply.describe();
    EXPECT_EQ(string_at(reply, "/info/role"), "assistant");
    EXPECT_EQ(string_at(reply, "/info/finish"), "stop") << t.reply.describe();
    EXPECT_EQ(find(reply, "/info/error"), nullptr) << t.reply.describe();
  }

  FakeModelServer model_;
  TempDir project_{"switchboard-project"};
  TempDir data_{"switchboard-data"};
};

// ---- a turn with each built-in tool (OpenAI-compatible wire format) ---------------------------

class SessionTools : public SessionTest {};

TEST_F(SessionTools, Bash) {
  start_server(openai_config());
  auto t = tool_turn("bash", json::object{{"command", "echo hello-$((6*7)) && pwd"},
                                          {"description", "Print a greeting"}});
  expect_tool_turn_completed(t, "bash");
  std::string output = string_at(json::value(t.part), "/state/output");
  EXPECT_TRUE(contains(output, "hello-42")) << output;
  EXPECT_TRUE(contains(output, project_.path().string()))
      << "bash does not run in the project directory: " << output;
  EXPECT_EQ(value_at(json::value(t.part), "/state/metadata/exit"), 0) << str(t.part);
  EXPECT_EQ(string_at(json::value(t.part), "/state/title"), "Print a greeting");
}

TEST_F(SessionTools, Read) {
  write_file(project_.path() / "notes.txt", "alpha\nbeta\ngamma\n");
  start_server(openai_config());
  auto t = tool_turn("read", json::object{{"filePath", (project_.path() / "notes.txt").string()}});
  expect_tool_turn_completed(t, "read");
  std::string output = string_at(json::value(t.part), "/state/output");
  EXPECT_TRUE(contains(output, "00001| alpha")) << output;
  EXPECT_TRUE(contains(output, "00003| gamma")) << output;
}

TEST_F(SessionTools, ReadWithARelativePathResolvesFromTheProjectDirectory) {
  write_file(project_.path() / "sub" / "rel.txt", "relative content\n");
  start_server(openai_config());
  auto t = tool_turn("read", json::object{{"filePath", "sub/rel.txt"}});
  expect_tool_turn_completed(t, "read");
  EXPECT_TRUE(contains(string_at(json::value(t.part), "/state/output"), "relative content"))
      << str(t.part);
}

TEST_F(SessionTools, List) {
  write_file(project_.path() / "src" / "main.cpp", "int main() {}\n");
  write_file(project_.path() / "README.md", "# readme\n");
  start_server(openai_config());
  auto t = tool_turn("list", json::object{});
  expect_tool_turn_completed(t, "list");
  std::string output = string_at(json::value(t.part), "/state/output");
  EXPECT_TRUE(contains(output, "README.md")) << output;
  EXPECT_TRUE(contains(output, "src/")) << output;
  EXPECT_TRUE(contains(output, "main.cpp")) << output;
}

TEST_F(SessionTools, Glob) {
  write_file(project_.path() / "a" / "one.txt", "1");
  write_file(project_.path() / "b" / "two.txt", "2");
  write_file(project_.path() / "b" / "three.md", "3");
  start_server(openai_config());
  auto t = tool_turn("glob", json::object{{"pattern", "**/*.txt"}});
  expect_tool_turn_completed(t, "glob");
  std::string output = string_at(json::value(t.part), "/state/output");
  EXPECT_TRUE(contains(output, "one.txt")) << output;
  EXPECT_TRUE(contains(output, "two.txt")) << output;
  EXPECT_FALSE(contains(output, "three.md")) << output;
}

TEST_F(SessionTools, Grep) {
  write_file(project_.path() / "hay.txt", "straw\nthe needle is here\nstraw\n");
  write_file(project_.path() / "other.txt", "nothing\n");
  start_server(openai_config());
  auto t = tool_turn("grep", json::object{{"pattern", "needle"}});
  expect_tool_turn_completed(t, "grep");
  std::string output = string_at(json::value(t.part), "/state/output");
  EXPECT_TRUE(contains(output, "hay.txt")) << output;
  EXPECT_TRUE(contains(output, "Line 2: the needle is here")) << output;
  EXPECT_FALSE(contains(output, "other.txt")) << output;
}

TEST_F(SessionTools, Edit) {
  fs::path file = project_.path() / "config.ini";
  write_file(file, "mode = slow\nlevel = 1\n");
  start_server(openai_config());
  auto t = tool_turn("edit", json::object{{"filePath", file.string()},
                                          {"oldString", "mode = slow"},
                                          {"newString", "mode = fast"}});
  expect_tool_turn_completed(t, "edit");
  EXPECT_EQ(read_text(file), "mode = fast\nlevel = 1\n");
  EXPECT_TRUE(contains(string_at(json::value(t.part), "/state/metadata/diff"), "+mode = fast"))
      << str(t.part);
}

// A file that is not UTF-8 (Latin-1 here) overwritten by the model: the call's diff holds the
// old bytes, and the message must still be stored and read back (it was stored as invalid JSON:
// every later read of the session's messages failed, and PostgreSQL refused the row). Those bytes
// read as U+FFFD in the diff; the file itself gets what the model wrote.
TEST_F(SessionTools, WriteOverAFileThatIsNotUtf8KeepsTheSessionReadable) {
  fs::path file = project_.path() / "latin1.txt";
  write_file(file, "caf\xe9 cr\xe8me\n");
  start_server(openai_config());
  auto t = tool_turn("write", json::object{{"filePath", file.string()}, {"content", "tea\n"}});
  expect_tool_turn_completed(t, "write");
  EXPECT_EQ(read_text(file), "tea\n");
  std::string diff = string_at(json::value(t.part), "/state/metadata/diff");
  EXPECT_TRUE(contains(diff, "-caf\xEF\xBF\xBD cr\xEF\xBF\xBDme")) << diff;
  EXPECT_TRUE(contains(diff, "+tea")) << diff;
  auto before = messages(t.session);
  ASSERT_EQ(before.size(), 3u) << str(before);  // the prompt, the call's step, the answer's
  server_.reset();
  start_server(openai_config());
  EXPECT_EQ(messages(t.session), before);
}

TEST_F(SessionTools, Write) {
  fs::path file = project_.path() / "out" / "new.txt";
  start_server(openai_config());
  auto t = tool_turn("write",
                     json::object{{"filePath", file.string()}, {"content", "written by a tool\n"}});
  expect_tool_turn_completed(t, "write");
  EXPECT_EQ(read_text(file), "written by a tool\n");
}

TEST_F(SessionTools, TodoWriteThenTodoRead) {
  start_server(openai_config());
  json::array todos{
      json::object{{"id", "t1"},
                   {"content", "write the tests"},
                   {"status", "in_progress"},
                   {"priority", "high"}},
      json::object{
          {"id", "t2"}, {"content", "ship it"}, {"status", "pending"}, {"priority", "low"}}};
  model_.push(FakeResponse::with_tool_call("call_w", "todowrite", json::object{{"todos", todos}}));
  model_.push(FakeResponse::with_tool_call("call_r", "todoread", json::object{}));
  model_.push(FakeResponse::with_text("Two todos."));
  std::string sid = create_session();
  auto reply = prompt(sid, "plan the work");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "Two todos.");
  ASSERT_EQ(model_.request_count(), 3u);

  auto list = messages(sid);
  auto written = tool_part(list, "call_w");
  auto read = tool_part(list, "call_r");
  ASSERT_TRUE(written && read) << str(list);
  EXPECT_EQ(string_at(json::value(*written), "/state/status"), "completed") << str(*written);
  EXPECT_EQ(string_at(json::value(*read), "/state/status"), "completed") << str(*read);
  std::string output = string_at(json::value(*read), "/state/output");
  EXPECT_TRUE(contains(output, "write the tests")) << output;
  EXPECT_TRUE(contains(output, "ship it")) << output;

  auto requests = model_.requests();
  EXPECT_EQ(string_at(openai_tool_message(requests[1], "call_w"), "/content"),
            string_at(json::value(*written), "/state/output"));
  EXPECT_EQ(string_at(openai_tool_message(requests[2], "call_r"), "/content"), output);
  // The whole conversation is sent each step: the first result is still there.
  EXPECT_TRUE(openai_tool_message(requests[2], "call_w").is_object()) << requests[2].body;
}

// The list is the session's: GET /session/{id}/todo shows it, it survives a restart, and it goes
// with its session.
TEST_F(SessionTools, TodosAreKeptWithTheirSessionAcrossARestart) {
  start_server(openai_config());
  json::array todos{json::object{
      {"id", "t1"}, {"content", "keep me"}, {"status", "pending"}, {"priority", "medium"}}};
  model_.push(FakeResponse::with_tool_call("call_w", "todowrite", json::object{{"todos", todos}}));
  model_.push(FakeResponse::with_text("Noted."));
  std::string sid = create_session();
  std::string other = create_session();
  ASSERT_TRUE(IsOk(prompt(sid, "plan")));
  auto listed = http_get(port(), "/session/" + sid + "/todo");
  ASSERT_TRUE(IsOk(listed));
  EXPECT_EQ(listed.json(), json::value(todos));
  EXPECT_EQ(http_get(port(), "/session/" + other + "/todo").json(), json::array{});
  EXPECT_TRUE(IsError(http_get(port(), "/session/ses_missing/todo"), 404, "NOT_FOUND"));

  server_.reset();
  start_server(openai_config());
  EXPECT_EQ(http_get(port(), "/session/" + sid + "/todo").json(), json::value(todos))
      << "the list survives a restart";
  model_.push(FakeResponse::with_tool_call("call_r", "todoread", json::object{}));
  model_.push(FakeResponse::with_text("Read."));
  ASSERT_TRUE(IsOk(prompt(sid, "what is left?")));
  auto read = tool_part(messages(sid), "call_r");
  ASSERT_TRUE(read);
  EXPECT_TRUE(contains(string_at(json::value(*read), "/state/output"), "keep me")) << str(*read);

  ASSERT_TRUE(IsOk(http_request(port(), "DELETE", "/session/" + sid)));
  EXPECT_TRUE(IsError(http_get(port(), "/session/" + sid + "/todo"), 404, "NOT_FOUND"));
}

TEST_F(SessionTools, AFailingToolEndsInErrorAndTheModelIsTold) {
  start_server(openai_config());
  model_.push(FakeResponse::with_tool_call(
      "call_r", "read", json::object{{"filePath", (project_.path() / "missing.txt").string()}}));
  model_.push(FakeResponse::with_text("It is missing."));
  std::string sid = create_session();
  auto reply = prompt(sid, "read the missing file");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "It is missing.");
  auto part = tool_part(messages(sid), "call_r");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  std::string error = string_at(json::value(*part), "/state/error");
  EXPECT_TRUE(contains(error, "missing.txt")) << error;
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_TRUE(contains(string_at(openai_tool_message(*second, "call_r"), "/content"), error))
      << second->body;
}

// ---- the Anthropic wire format ------------------------------------------------------------------

TEST_F(SessionTools, ToolTurnOverAnthropic) {
  write_file(project_.path() / "notes.txt", "from anthropic\n");
  json::object cfg = test_config();
  cfg["provider"] = json::object{{"claude", json::object{{"type", "anthropic"},
                                                         {"baseURL", model_.base_url()},
                                                         {"apiKey", "ak-test"},
                                                         {"models", json::array{"claude-fake"}}}}};
  cfg["model"] = "claude/claude-fake";
  start_server(cfg);

  FakeResponse call = FakeResponse::with_tool_call(
      "toolu_1", "read", json::object{{"filePath", (project_.path() / "notes.txt").string()}});
  call.text = "Let me look.";
  model_.push(call);
  model_.push(FakeResponse::with_text("It says: from anthropic"));
  std::string sid = create_session();
  auto reply = prompt(sid, "what is in notes.txt?");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "It says: from anthropic");
  EXPECT_EQ(string_at(reply.json(), "/info/providerID"), "claude");
  EXPECT_EQ(string_at(reply.json(), "/info/modelID"), "claude-fake");
  EXPECT_EQ(value_at(reply.json(), "/info/tokens/output"), 7) << reply.describe();

  auto list = messages(sid);
  auto part = tool_part(list, "toolu_1");
  ASSERT_TRUE(part) << str(list);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  std::string output = string_at(json::value(*part), "/state/output");
  EXPECT_TRUE(contains(output, "from anthropic")) << output;

  auto requests = model_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].target, "/messages");
  EXPECT_EQ(requests[0].header("x-api-key").value_or(""), "ak-test");
  EXPECT_TRUE(requests[0].header("anthropic-version").has_value());
  EXPECT_EQ(string_at(requests[0].json, "/model"), "claude-fake");
  bool offered = false;
  for (const auto& t : array_at(requests[0].json, "/tools"))
    if (string_at(t, "/name") == "read") {
      offered = true;
      EXPECT_EQ(string_at(t, "/input_schema/type"), "object") << str(t);
    }
  EXPECT_TRUE(offered) << requests[0].body;

  // The call and its result, as Anthropic wants them: tool_use in the assistant turn,
  // tool_result (same id) first in the next user turn.
  const json::array& sent = array_at(requests[1].json, "/messages");
  ASSERT_GE(sent.size(), 3u) << requests[1].body;
  const json::value& assistant = sent[sent.size() - 2];
  const json::value& user = sent.back();
  EXPECT_EQ(string_at(assistant, "/role"), "assistant");
  bool used = false;
  for (const auto& block : array_at(assistant, "/content"))
    if (string_at(block, "/type") == "tool_use" && string_at(block, "/id") == "toolu_1") {
      used = true;
      EXPECT_EQ(string_at(block, "/name"), "read");
    }
  EXPECT_TRUE(used) << requests[1].body;
  EXPECT_EQ(string_at(user, "/role"), "user");
  EXPECT_EQ(string_at(user, "/content/0/type"), "tool_result") << requests[1].body;
  EXPECT_EQ(string_at(user, "/content/0/tool_use_id"), "toolu_1") << requests[1].body;
  EXPECT_EQ(string_at(user, "/content/0/content"), output);
}

// ---- client tools -------------------------------------------------------------------------------

class SessionClientTools : public SessionTest {};

TEST_F(SessionClientTools, ClientToolAnsweredOverWebSocket) {
  start_server(openai_config());
  std::string sid = create_session();
  auto ws = connect_client(sid, {tool_def("lookup", "Looks a word up")});
  BusEvents bus(port());

  model_.push(FakeResponse::with_tool_call("call_c", "client_c1_lookup",
                                           json::object{{"text", "switchboard"}}));
  model_.push(FakeResponse::with_text("Found it."));
  prompt_async(sid, "look it up");

  json::object req = next_ws_request(*ws);
  json::value r(req);
  EXPECT_EQ(string_at(r, "/tool"), "client_c1_lookup") << str(r);
  EXPECT_EQ(string_at(r, "/sessionID"), sid) << str(r);
  EXPECT_EQ(string_at(r, "/callID"), "call_c") << str(r);
  EXPECT_EQ(req.at("input"), (json::object{{"text", "switchboard"}})) << str(r);
  ws->send_json(json::object{{"type", "result"},
                             {"requestID", req.at("requestID")},
                             {"result", json::object{{"status", "success"},
                                                     {"title", "Looked up"},
                                                     {"output", "a telephone exchange"}}}});
  wait_idle(bus, sid);

  auto first = model_.wait_for_request(0, 1s);
  ASSERT_TRUE(first);
  json::value offered = openai_tool(*first, "client_c1_lookup");
  ASSERT_TRUE(offered.is_object()) << first->body;
  EXPECT_EQ(string_at(offered, "/description"), "Looks a word up");
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_EQ(string_at(openai_tool_message(*second, "call_c"), "/content"), "a telephone exchange")
      << second->body;

  auto part = tool_part(messages(sid), "call_c");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  EXPECT_EQ(string_at(json::value(*part), "/state/title"), "Looked up");
  EXPECT_EQ(text_of(messages(sid).back()), "Found it.");
}

TEST_F(SessionClientTools, ClientToolOfAnotherSessionIsNotOffered) {
  start_server(openai_config());
  std::string mine = create_session();
  std::string other = create_session();
  auto ws = connect_client(other, {tool_def("lookup")});
  auto reply = prompt(mine, "hello");
  ASSERT_TRUE(IsOk(reply));
  auto first = model_.wait_for_request(0, 1s);
  ASSERT_TRUE(first);
  auto names = openai_tool_names(*first);
  EXPECT_EQ(std::count(names.begin(), names.end(), "client_c1_lookup"), 0) << first->body;
}

TEST_F(SessionClientTools, ServerAndClientCallsInOneStep) {
  start_server(openai_config());
  std::string sid = create_session();
  auto ws = connect_client(sid, {tool_def("confirm")});
  BusEvents bus(port());

  model_.push(FakeResponse::with_tool_calls(
      {FakeToolCall{"call_s", "bash",
                    R"({"command": "echo from-server", "description": "server side"})"},
       FakeToolCall{"call_c", "client_c1_confirm", R"({"text": "ok?"})"}}));
  model_.push(FakeResponse::with_text("Both done."));
  prompt_async(sid, "do both");

  json::object req = next_ws_request(*ws);
  EXPECT_EQ(string_at(json::value(req), "/callID"), "call_c");
  // The server tool does not wait for the client's answer.
  auto bash = wait_part_status(bus, "call_s", "completed");
  ASSERT_TRUE(bash) << "the bash call did not complete while the client call was pending";
  EXPECT_TRUE(contains(string_at(json::value(*bash), "/state/output"), "from-server"));
  EXPECT_EQ(model_.request_count(), 1u) << "the step went on before the client answered";

  ws->send_json(json::object{{"type", "result"},
                             {"requestID", req.at("requestID")},
                             {"status", "success"},
                             {"output", "confirmed"}});
  wait_idle(bus, sid);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_TRUE(
      contains(string_at(openai_tool_message(*second, "call_s"), "/content"), "from-server"))
      << second->body;
  EXPECT_EQ(string_at(openai_tool_message(*second, "call_c"), "/content"), "confirmed")
      << second->body;
  // Both calls belong to one assistant message, as the model made them.
  json::value call = openai_call_message(*second, "call_s");
  EXPECT_EQ(array_at(call, "/tool_calls").size(), 2u) << second->body;
  EXPECT_EQ(model_.request_count(), 2u);
}

TEST_F(SessionClientTools, AbortCancelsTheClientCall) {
  start_server(openai_config());
  std::string sid = create_session();
  auto ws = connect_client(sid, {tool_def("slow")});
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call("call_c", "client_c1_slow", json::object{}));
  model_.push(FakeResponse::with_text("must not be asked"));
  prompt_async(sid, "be slow");
  json::object req = next_ws_request(*ws);

  auto t0 = Clock::now();
  ASSERT_TRUE(IsOk(http_post(port(), "/session/" + sid + "/abort", json::object{})));
  auto cancel = ws->next_message_of_type("cancel", 3s);
  ASSERT_TRUE(cancel) << "the client was not told that its call was cancelled";
  EXPECT_EQ(value_at(*cancel, "/requestID"), req.at("requestID")) << str(*cancel);
  wait_idle(bus, sid, 5s);
  EXPECT_LT(elapsed_ms(t0), 3000);
  auto part = tool_part(messages(sid), "call_c");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_EQ(model_.request_count(), 1u);
  // A result that comes after the cancel changes nothing.
  ws->send_json(json::object{{"type", "result"},
                             {"requestID", req.at("requestID")},
                             {"status", "success"},
                             {"output", "too late"}});
  auto late = ws->next_message_of_type("error", 3s);
  EXPECT_TRUE(late) << "a result for a cancelled call was accepted silently";
  part = tool_part(messages(sid), "call_c");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
}

TEST_F(SessionClientTools, ClientThatDisconnectsMidCallGivesTheModelAnError) {
  start_server(openai_config());
  std::string sid = create_session();
  auto ws = connect_client(sid, {tool_def("fragile")});
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call("call_c", "client_c1_fragile", json::object{}));
  model_.push(FakeResponse::with_text("The client went away."));
  prompt_async(sid, "use the client");
  next_ws_request(*ws);
  auto t0 = Clock::now();
  ws->drop();
  wait_idle(bus, sid, 5s);
  EXPECT_LT(elapsed_ms(t0), 3000) << "a vanished client must not leave the turn waiting";
  auto part = tool_part(messages(sid), "call_c");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second) << "the model was not told about the failed call";
  json::value sent = openai_tool_message(*second, "call_c");
  EXPECT_EQ(string_at(sent, "/content"), "Error: " + string_at(json::value(*part), "/state/error"))
      << second->body;
  EXPECT_EQ(text_of(messages(sid).back()), "The client went away.");
}

TEST_F(SessionClientTools, InteractiveClientToolMakesTheSessionAwaitInput) {
  start_server(openai_config());
  std::string sid = create_session();
  json::object def = tool_def("ask_user", "Asks the person");
  def["interactive"] = true;
  auto ws = connect_client(sid, {def});
  BusEvents bus(port());

  model_.push(FakeResponse::with_tool_call("call_i", "client_c1_ask_user",
                                           json::object{{"text", "Proceed?"}}));
  model_.push(FakeResponse::with_text("Proceeding."));
  prompt_async(sid, "ask me");
  json::object req = next_ws_request(*ws);

  json::object st = status();
  EXPECT_EQ(string_at(json::value(st), "/" + sid + "/type"), "awaiting-input") << str(st);
  ASSERT_TRUE(
      bus.next_where("session.status", "/properties/status/type", json::value("awaiting-input")));

  ws->send_json(json::object{{"type", "result"},
                             {"requestID", req.at("requestID")},
                             {"status", "success"},
                             {"output", "yes"}});
  wait_idle(bus, sid);
  st = status();
  EXPECT_FALSE(st.contains(sid)) << str(st);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_EQ(string_at(openai_tool_message(*second, "call_i"), "/content"), "yes");
}

// ---- permissions --------------------------------------------------------------------------------

class SessionPermission : public SessionTest {
 protected:
  json::object ask_bash_config() {
    return openai_config(json::object{{"permission", json::object{{"bash", "ask"}}}});
  }
};

TEST_F(SessionPermission, AskThenReplyOnceRunsTheTool) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call(
      "call_b", "bash", json::object{{"command", "echo approved"}, {"description", "echo"}}));
  model_.push(FakeResponse::with_text("Ran it."));
  prompt_async(sid, "run it");

  auto asked = bus.next("permission.asked");
  ASSERT_TRUE(asked) << "no permission.asked event";
  json::value a(*asked);
  std::string id = string_at(a, "/properties/id");
  EXPECT_EQ(id.rfind("per_", 0), 0u) << str(a);
  EXPECT_EQ(string_at(a, "/properties/sessionID"), sid);
  EXPECT_EQ(string_at(a, "/properties/permission"), "bash");
  EXPECT_EQ(string_at(a, "/properties/patterns/0"), "echo approved") << str(a);
  EXPECT_EQ(string_at(a, "/properties/tool/callID"), "call_b") << str(a);

  auto listed = http_get(port(), "/permission");
  ASSERT_TRUE(IsOk(listed));
  ASSERT_EQ(listed.json().as_array().size(), 1u) << listed.describe();
  EXPECT_EQ(string_at(listed.json(), "/0/id"), id);
  EXPECT_EQ(string_at(json::value(status()), "/" + sid + "/type"), "awaiting-input");
  auto part = tool_part(messages(sid), "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "running")
      << "a call waiting for permission is running (not completed): " << str(*part);

  auto replied = http_post(port(), "/permission/" + id + "/reply", json::object{{"reply", "once"}});
  ASSERT_TRUE(IsOk(replied));
  EXPECT_EQ(replied.json(), json::value(true));
  auto event = bus.next("permission.replied");
  ASSERT_TRUE(event);
  EXPECT_EQ(string_at(json::value(*event), "/properties/reply"), "once") << str(*event);
  wait_idle(bus, sid);

  part = tool_part(messages(sid), "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_TRUE(contains(string_at(openai_tool_message(*second, "call_b"), "/content"), "approved"));
  EXPECT_EQ(http_get(port(), "/permission").json(), json::array{});
  // A second answer to the same ask finds nothing waiting.
  EXPECT_TRUE(
      IsError(http_post(port(), "/permission/" + id + "/reply", json::object{{"reply", "once"}}),
              404, "NOT_FOUND"));
}

TEST_F(SessionPermission, RejectEndsThePartInErrorAndStopsTheTurn) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  BusEvents bus(port());
  fs::path marker = project_.path() / "ran.marker";
  model_.push(FakeResponse::with_tool_call(
      "call_b", "bash",
      json::object{{"command", "touch " + marker.string()}, {"description", "touch"}}));
  model_.push(FakeResponse::with_text("should not be asked"));
  prompt_async(sid, "run it");
  auto asked = bus.next("permission.asked");
  ASSERT_TRUE(asked);
  std::string id = string_at(json::value(*asked), "/properties/id");
  ASSERT_TRUE(
      IsOk(http_post(port(), "/permission/" + id + "/reply", json::object{{"reply", "reject"}})));
  wait_idle(bus, sid);

  auto part = tool_part(messages(sid), "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_TRUE(contains(string_at(json::value(*part), "/state/error"), "rejected")) << str(*part);
  EXPECT_FALSE(fs::exists(marker)) << "the rejected command ran";
  EXPECT_EQ(model_.request_count(), 1u) << "a bare reject stops the turn";
  // The turn's last message says why it stopped, as stored.
  json::value last = messages(sid).back();
  EXPECT_EQ(string_at(last, "/info/error/name"), "PermissionRejectedError") << str(last);
  EXPECT_TRUE(contains(string_at(last, "/info/error/data/message"), "rejected")) << str(last);
}

TEST_F(SessionPermission, RejectWithAMessageGuidesTheModel) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call(
      "call_b", "bash", json::object{{"command", "rm -rf build"}, {"description", "clean"}}));
  model_.push(FakeResponse::with_text("Understood, I will not delete it."));
  prompt_async(sid, "clean up");
  auto asked = bus.next("permission.asked");
  ASSERT_TRUE(asked);
  std::string id = string_at(json::value(*asked), "/properties/id");
  ASSERT_TRUE(IsOk(http_post(
      port(), "/permission/" + id + "/reply",
      json::object{{"reply", "reject"}, {"message", "keep the build directory, use make clean"}})));
  wait_idle(bus, sid);

  auto part = tool_part(messages(sid), "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second) << "the model was not told about the rejection";
  std::string sent = string_at(openai_tool_message(*second, "call_b"), "/content");
  EXPECT_TRUE(contains(sent, "keep the build directory, use make clean")) << second->body;
  EXPECT_EQ(text_of(messages(sid).back()), "Understood, I will not delete it.");
  EXPECT_EQ(find(messages(sid).back(), "/info/error"), nullptr) << "guidance is not an error";
}

TEST_F(SessionPermission, AlwaysAllowsTheSameKindOfCallForTheRestOfTheSession) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call(
      "call_1", "bash", json::object{{"command", "echo one"}, {"description", "first"}}));
  model_.push(FakeResponse::with_tool_call(
      "call_2", "bash", json::object{{"command", "echo two"}, {"description", "second"}}));
  model_.push(FakeResponse::with_text("Both ran."));
  prompt_async(sid, "echo twice");
  auto asked = bus.next("permission.asked");
  ASSERT_TRUE(asked);
  std::string id = string_at(json::value(*asked), "/properties/id");
  ASSERT_TRUE(
      IsOk(http_post(port(), "/permission/" + id + "/reply", json::object{{"reply", "always"}})));
  auto events = bus.until_idle(sid);
  for (const auto& e : events)
    EXPECT_NE(string_at(json::value(e), "/type"), "permission.asked")
        << "asked again after \"always\": " << str(e);
  auto list = messages(sid);
  for (auto call : {"call_1", "call_2"}) {
    auto part = tool_part(list, call);
    ASSERT_TRUE(part) << call;
    EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  }
  EXPECT_EQ(model_.request_count(), 3u);
}

// What "always" allowed is the session's, stored with it (its `approved` rules): after a restart
// the session's next turn runs such a call without asking.
TEST_F(SessionPermission, AlwaysOutlivesARestart) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  std::vector<std::string> always;
  {
    BusEvents bus(port());
    model_.push(FakeResponse::with_tool_call(
        "call_1", "bash", json::object{{"command", "echo one"}, {"description", "first"}}));
    model_.push(FakeResponse::with_text("Ran one."));
    prompt_async(sid, "echo once");
    auto asked = bus.next("permission.asked");
    ASSERT_TRUE(asked);
    json::value event(*asked);  // named: the loop below reads into it
    for (const auto& p : array_at(event, "/properties/always"))
      always.emplace_back(p.as_string());
    ASSERT_FALSE(always.empty()) << str(*asked);
    ASSERT_TRUE(IsOk(http_post(
        port(), "/permission/" + string_at(json::value(*asked), "/properties/id") + "/reply",
        json::object{{"reply", "always"}})));
    bus.until_idle(sid);
  }
  auto shown = http_get(port(), "/session/" + sid);
  ASSERT_TRUE(IsOk(shown));
  json::array approved;
  for (const auto& pattern : always)
    approved.push_back(
        json::object{{"permission", "bash"}, {"pattern", pattern}, {"action", "allow"}});
  EXPECT_EQ(shown.json().at("approved"), approved) << shown.describe();

  server_.reset();
  start_server(ask_bash_config());
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call(
      "call_2", "bash", json::object{{"command", "echo two"}, {"description", "second"}}));
  model_.push(FakeResponse::with_text("Ran two."));
  prompt_async(sid, "echo again");
  for (const auto& e : bus.until_idle(sid))
    EXPECT_NE(string_at(json::value(e), "/type"), "permission.asked")
        << "asked again after the restart: " << str(e);
  auto part = tool_part(messages(sid), "call_2");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
}

// What `always` approved is taken back with PATCH `approved: []`: the next call asks again, and
// the session shows none. The session's client only, for a client's session.
TEST_F(SessionPermission, AnAlwaysIsTakenBackWithPatch) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  // Runs one bash call; `reply`: the ask it must raise is answered so ("" : it must not ask).
  auto run_bash = [&](const std::string& call_id, const std::string& reply) {
    BusEvents bus(port());
    model_.push(FakeResponse::with_tool_call(
        call_id, "bash", json::object{{"command", "echo " + call_id}, {"description", call_id}}));
    model_.push(FakeResponse::with_text("Ran it."));
    prompt_async(sid, "run " + call_id);
    if (!reply.empty()) {
      auto asked = bus.next("permission.asked");
      ASSERT_TRUE(asked) << call_id << " did not ask";
      ASSERT_TRUE(IsOk(http_post(
          port(), "/permission/" + string_at(json::value(*asked), "/properties/id") + "/reply",
          json::object{{"reply", reply}})));
    }
    for (const auto& e : bus.until_idle(sid))
      EXPECT_NE(string_at(json::value(e), "/type"), "permission.asked")
          << call_id << " asked: " << str(e);
    auto part = tool_part(messages(sid), call_id);
    ASSERT_TRUE(part) << call_id;
    EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  };
  run_bash("call_1", "always");
  run_bash("call_2", "");  // approved: no ask
  auto shown = http_get(port(), "/session/" + sid);
  ASSERT_TRUE(IsOk(shown));
  EXPECT_FALSE(shown.json().at("approved").as_array().empty()) << shown.describe();

  EXPECT_TRUE(IsError(http_request(port(), "PATCH", "/session/" + sid,
                                   json::serialize(json::object{{"approved", "none"}})),
                      400, "INVALID_REQUEST", {"approved"}));
  json::array deny{json::object{{"permission", "bash"}, {"pattern", "*"}, {"action", "deny"}}};
  EXPECT_TRUE(IsError(http_request(port(), "PATCH", "/session/" + sid,
                                   json::serialize(json::object{{"approved", deny}})),
                      400, "INVALID_REQUEST", {"approved[0].action must be \"allow\""}));
  auto cleared = http_request(port(), "PATCH", "/session/" + sid,
                              json::serialize(json::object{{"approved", json::array()}}));
  ASSERT_TRUE(IsOk(cleared));
  // None approved: the field is left out, as for a session that never had any.
  EXPECT_FALSE(cleared.json().as_object().contains("approved")) << cleared.describe();
  run_bash("call_3", "once");  // taken back: it asks again
  shown = http_get(port(), "/session/" + sid);
  EXPECT_FALSE(shown.json().as_object().contains("approved")) << shown.describe();
}

// Taken back while a turn runs: that turn's next call asks again too.
TEST_F(SessionPermission, AnAlwaysTakenBackDuringATurnAsksAgainInIt) {
  start_server(ask_bash_config());
  std::string sid = create_session();
  auto ws = connect_client(sid, {tool_def("wait")});
  BusEvents bus(port());
  json::object echo{{"command", "echo one"}, {"description", "echo"}};
  model_.push(FakeResponse::with_tool_call("call_1", "bash", echo));
  model_.push(
      FakeResponse::with_tool_call("call_w", "client_c1_wait", json::object{{"text", "x"}}));
  model_.push(FakeResponse::with_tool_call("call_2", "bash", echo));
  model_.push(FakeResponse::with_text("Done."));
  prompt_async(sid, "echo, wait, echo");

  auto asked = bus.next("permission.asked");
  ASSERT_TRUE(asked) << "the first call did not ask";
  ASSERT_TRUE(IsOk(http_post(
      port(), "/permission/" + string_at(json::value(*asked), "/properties/id") + "/reply",
      json::object{{"reply", "always"}})));
  json::object req = next_ws_request(*ws);  // the turn waits for the client now
  ASSERT_TRUE(IsOk(http_request(port(), "PATCH", "/session/" + sid,
                                json::serialize(json::object{{"approved", json::array()}}))));
  ws->send_json(
      json::object{{"type", "result"},
                   {"requestID", req.at("requestID")},
                   {"result", json::object{{"status", "success"}, {"output", "waited"}}}});
  auto again = bus.next("permission.asked");
  ASSERT_TRUE(again) << "the call after the take-back did not ask";
  EXPECT_EQ(string_at(json::value(*again), "/properties/tool/callID"), "call_2") << str(*again);
  ASSERT_TRUE(IsOk(http_post(
      port(), "/permission/" + string_at(json::value(*again), "/properties/id") + "/reply",
      json::object{{"reply", "once"}})));
  wait_idle(bus, sid);
  auto part = tool_part(messages(sid), "call_2");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  auto shown = http_get(port(), "/session/" + sid);
  EXPECT_FALSE(shown.json().as_object().contains("approved")) << shown.describe();
}

TEST_F(SessionPermission, DoomLoopAsksOnTheThirdIdenticalCall) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents bus(port());
  json::object input{{"command", "echo again"}, {"description", "repeat"}};
  for (auto id : {"call_1", "call_2", "call_3"})
    model_.push(FakeResponse::with_tool_call(id, "bash", input));
  model_.push(FakeResponse::with_text("I will stop repeating myself."));
  prompt_async(sid, "loop");

  auto asked = bus.next("permission.asked");
  ASSERT_TRUE(asked) << "no doom_loop ask";
  json::value a(*asked);
  EXPECT_EQ(string_at(a, "/properties/permission"), "doom_loop") << str(a);
  EXPECT_EQ(string_at(a, "/properties/patterns/0"), "bash") << str(a);
  EXPECT_EQ(string_at(a, "/properties/tool/callID"), "call_3") << str(a);
  EXPECT_EQ(model_.request_count(), 3u);
  auto list = messages(sid);
  for (auto call : {"call_1", "call_2"})
    EXPECT_EQ(
        string_at(json::value(tool_part(list, call).value_or(json::object{})), "/state/status"),
        "completed")
        << call;

  ASSERT_TRUE(IsOk(http_post(port(), "/permission/" + string_at(a, "/properties/id") + "/reply",
                             json::object{{"reply", "once"}})));
  wait_idle(bus, sid);
  auto part = tool_part(messages(sid), "call_3");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  EXPECT_EQ(model_.request_count(), 4u);
}

// POST /session/{id}/message answers with the turn's last message: when an ask that nobody
// answered stopped the turn, that answer says so (it had no text and no error).
TEST_F(SessionPermission, TheAnswerOfATurnThatAnUnansweredAskStoppedSaysWhy) {
  json::object cfg = openai_config();
  cfg["permission"] = json::object{{"bash", "ask"}, {"timeout", 300}};
  start_server(cfg);
  std::string sid = create_session();
  model_.push(FakeResponse::with_tool_call(
      "call_b", "bash", json::object{{"command", "echo late"}, {"description", "echo"}}));
  auto reply = prompt(sid, "run it");
  ASSERT_TRUE(IsOk(reply));
  json::value v = reply.json();
  EXPECT_EQ(string_at(v, "/info/error/name"), "PermissionRejectedError") << reply.describe();
  EXPECT_TRUE(contains(string_at(v, "/info/error/data/message"), "nobody answered within 300 ms"))
      << reply.describe();
  EXPECT_EQ(value_at(v, "/info/error"), value_at(messages(sid).back(), "/info/error"))
      << "the answer and the stored turn differ";
}

TEST_F(SessionPermission, UnansweredAskTimesOut) {
  json::object cfg = openai_config();
  cfg["permission"] = json::object{{"bash", "ask"}, {"timeout", 300}};
  start_server(cfg);
  std::string sid = create_session();
  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call(
      "call_b", "bash", json::object{{"command", "echo late"}, {"description", "echo"}}));
  auto t0 = Clock::now();
  prompt_async(sid, "run it");
  wait_idle(bus, sid, 5s);
  EXPECT_LT(elapsed_ms(t0), 4000);
  auto part = tool_part(messages(sid), "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_EQ(http_get(port(), "/permission").json(), json::array{});
}

// ---- abort and busy sessions --------------------------------------------------------------------

class SessionTurn : public SessionTest {};

TEST_F(SessionTurn, AbortMidToolKillsTheProcessAndEndsThePart) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents bus(port());
  fs::path pid_file = project_.path() / "sleep.pid";
  model_.push(FakeResponse::with_tool_call(
      "call_s", "bash",
      json::object{{"command", "sleep 30 & echo $! > " + pid_file.string() + "; wait"},
                   {"description", "sleep"}}));
  model_.push(FakeResponse::with_text("should not be asked"));
  prompt_async(sid, "sleep");

  ASSERT_TRUE(wait_part_status(bus, "call_s", "running"));
  pid_t pid = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        std::ifstream in(pid_file);
        return static_cast<bool>(in >> pid) && pid > 0;
      },
      5s))
      << "the sleep did not start";
  ASSERT_TRUE(process_running(pid));

  auto t0 = Clock::now();
  auto aborted = http_post(port(), "/session/" + sid + "/abort", json::object{});
  ASSERT_TRUE(IsOk(aborted));
  EXPECT_EQ(aborted.json(), json::value(true));
  wait_idle(bus, sid, 5s);
  EXPECT_LT(elapsed_ms(t0), 3000) << "abort took too long";
  EXPECT_TRUE(wait_until([&] { return !process_running(pid); }, 3s))
      << "the sleep (pid " << pid << ") survived the abort";

  auto list = messages(sid);
  auto part = tool_part(list, "call_s");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_EQ(string_at(list.back(), "/info/error/name"), "MessageAbortedError") << str(list.back());
  EXPECT_EQ(model_.request_count(), 1u);
  EXPECT_FALSE(status().contains(sid));
  // Nothing left to abort.
  auto again = http_post(port(), "/session/" + sid + "/abort", json::object{});
  ASSERT_TRUE(IsOk(again));
  EXPECT_EQ(again.json(), json::value(false));
}

TEST_F(SessionTurn, BusySessionAnswers409AndAbortWhileWaitingForTheModel) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents bus(port());
  FakeResponse slow = FakeResponse::with_text("too late");
  slow.delay = 20s;
  model_.push(slow);
  prompt_async(sid, "first");
  ASSERT_TRUE(model_.wait_for_request(0, 5s));
  EXPECT_EQ(string_at(json::value(status()), "/" + sid + "/type"), "busy");

  EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + "/prompt_async", text_prompt("second")),
                      409, "CONFLICT"));
  EXPECT_TRUE(IsError(prompt(sid, "third"), 409, "CONFLICT"));
  // Another session is not affected.
  std::string other = create_session();
  model_.push(FakeResponse::with_text("other answer"));
  auto reply = prompt(other, "hello");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "other answer");

  auto t0 = Clock::now();
  ASSERT_TRUE(IsOk(http_post(port(), "/session/" + sid + "/abort", json::object{})));
  wait_idle(bus, sid, 5s);
  EXPECT_LT(elapsed_ms(t0), 3000);
  auto list = messages(sid);
  ASSERT_EQ(list.size(), 2u) << str(list);
  EXPECT_EQ(string_at(list.back(), "/info/error/name"), "MessageAbortedError") << str(list.back());
  EXPECT_NE(find(list.back(), "/info/time/completed"), nullptr) << str(list.back());
}

TEST_F(SessionTurn, SyncPromptAnswersWithTheAssistantMessage) {
  start_server(openai_config());
  std::string sid = create_session(json::object{{"title", "greeting"}});
  BusEvents bus(port());
  FakeResponse r = FakeResponse::with_text("Hello there, human.");
  r.reasoning = "They said hi.";
  model_.push(r);
  auto reply = prompt(sid, "hi");
  ASSERT_TRUE(IsOk(reply));
  json::value v = reply.json();
  EXPECT_EQ(string_at(v, "/info/role"), "assistant");
  EXPECT_EQ(string_at(v, "/info/sessionID"), sid);
  EXPECT_EQ(string_at(v, "/info/providerID"), "fake");
  EXPECT_EQ(string_at(v, "/info/modelID"), "fake-model");
  EXPECT_EQ(string_at(v, "/info/finish"), "stop");
  EXPECT_EQ(value_at(v, "/info/tokens/input"), 11) << reply.describe();
  EXPECT_EQ(value_at(v, "/info/tokens/output"), 7) << reply.describe();
  EXPECT_EQ(text_of(v), "Hello there, human.");
  std::set<std::string> types;
  for (const auto& p : array_at(v, "/parts"))
    types.insert(string_at(p, "/type"));
  for (auto t : {"step-start", "reasoning", "text", "step-finish"})
    EXPECT_TRUE(types.count(t)) << "no " << t << " part: " << reply.describe();

  auto list = messages(sid);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(string_at(list[0], "/info/role"), "user");
  EXPECT_EQ(text_of(list[0]), "hi");
  EXPECT_EQ(list[1], v) << "GET message differs from the prompt's answer";

  // The text and the reasoning streamed as deltas on /event, each to its own part.
  auto events = bus.until_idle(sid);
  std::map<std::string, std::string> streamed;  // by part id
  for (const auto& e : events)
    if (string_at(json::value(e), "/type") == "message.part.delta" &&
        string_at(json::value(e), "/properties/messageID") == string_at(v, "/info/id"))
      streamed[string_at(json::value(e), "/properties/partID")] +=
          string_at(json::value(e), "/properties/delta");
  for (const auto& p : array_at(v, "/parts")) {
    std::string type = string_at(p, "/type");
    if (type == "text" || type == "reasoning") {
      EXPECT_EQ(streamed[string_at(p, "/id")], string_at(p, "/text")) << type;
    }
  }
  EXPECT_EQ(streamed.size(), 2u);
}

// A fast model sends hundreds of text deltas in one read. Each /event subscriber gets all of the
// text and stays connected: the deltas of one read go out as one event (an event each overflowed
// every subscriber's queue of 1,024 frames before one could be written).
TEST_F(SessionTurn, ABurstOfThousandsOfDeltasReachesEverySubscriberWhole) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents first(port()), second(port());
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    text += 'w';
    text += std::to_string(i);
    text += ' ';
  }
  FakeResponse r = FakeResponse::with_text(text);
  r.text_pieces = 3000;
  model_.push(r);
  auto reply = prompt(sid, "say a lot");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), text);
  for (BusEvents* bus : {&first, &second}) {
    auto events = bus->until_idle(sid);
    std::string streamed;
    std::size_t deltas = 0;
    for (const auto& e : events)
      if (string_at(json::value(e), "/type") == "message.part.delta") {
        streamed += string_at(json::value(e), "/properties/delta");
        ++deltas;
      }
    EXPECT_EQ(streamed, text);
    EXPECT_LT(deltas, 1000u);
  }
  EXPECT_FALSE(contains(server().log(), "dropping a subscriber")) << server().log();
}

// ---- provider failures --------------------------------------------------------------------------

class SessionProvider : public SessionTest {};

TEST_F(SessionProvider, ServerErrorsAreRetriedThenNamedOnTheMessage) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents bus(port());
  for (int i = 0; i < 3; ++i)
    model_.push(FakeResponse::http_error(500, "upstream exploded"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  json::value v = reply.json();
  EXPECT_EQ(string_at(v, "/info/error/name"), "APIError") << reply.describe();
  EXPECT_TRUE(contains(string_at(v, "/info/error/data/message"), "upstream exploded"))
      << reply.describe();
  EXPECT_EQ(value_at(v, "/info/error/data/statusCode"), 500) << reply.describe();
  EXPECT_EQ(model_.request_count(), 3u) << "retry.attempts is 2: three tries in all";

  auto events = bus.until_idle(sid);
  std::vector<std::int64_t> attempts;
  bool session_error = false;
  for (const auto& e : events) {
    json::value ev(e);
    if (string_at(ev, "/type") == "session.status" &&
        string_at(ev, "/properties/status/type") == "retry") {
      attempts.push_back(find(ev, "/properties/status/attempt")->to_number<std::int64_t>());
      EXPECT_TRUE(contains(string_at(ev, "/properties/status/message"), "upstream exploded"));
      EXPECT_NE(find(ev, "/properties/status/next"), nullptr) << str(ev);
    }
    if (string_at(ev, "/type") == "session.error") {
      session_error = true;
      EXPECT_EQ(string_at(ev, "/properties/error/name"), "APIError") << str(ev);
      // The message's error as it is: the status and whether it was worth retrying too.
      EXPECT_EQ(value_at(ev, "/properties/error/data"), value_at(v, "/info/error/data")) << str(ev);
    }
  }
  EXPECT_EQ(attempts, (std::vector<std::int64_t>{1, 2}));
  EXPECT_TRUE(session_error) << "no session.error event";
}

TEST_F(SessionProvider, RateLimitIsRetriedAndTheTurnSucceeds) {
  start_server(openai_config());
  std::string sid = create_session();
  model_.push(FakeResponse::http_error(429, "slow down"));
  model_.push(FakeResponse::with_text("made it"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "made it");
  EXPECT_EQ(find(reply.json(), "/info/error"), nullptr) << reply.describe();
  EXPECT_EQ(model_.request_count(), 2u);
}

// `r` over a connection the model keeps open, after `delay`.
FakeResponse kept(FakeResponse r, std::chrono::milliseconds delay = 0ms) {
  r.connection = FakeResponse::Connection::KeepAlive;
  r.delay = delay;
  return r;
}

TEST_F(SessionProvider, KeepAliveConnectionIsReusedAndOneTheModelClosedIsReplaced) {
  start_server(openai_config());
  std::string sid = create_session();
  auto keep = [](FakeResponse r, FakeResponse::Connection c = FakeResponse::Connection::KeepAlive) {
    r.connection = c;
    return r;
  };
  model_.push(keep(FakeResponse::with_tool_call(
      "call_k", "bash", json::object{{"command", "echo kept"}, {"description", "echo"}})));
  model_.push(keep(FakeResponse::with_text("first")));
  model_.push(
      keep(FakeResponse::with_text("second"), FakeResponse::Connection::KeepAliveThenClose));
  model_.push(keep(FakeResponse::with_text("third")));
  auto first = prompt(sid, "one");
  ASSERT_TRUE(IsOk(first));
  EXPECT_EQ(text_of(first.json()), "first");
  auto second = prompt(sid, "two");
  ASSERT_TRUE(IsOk(second));
  EXPECT_EQ(text_of(second.json()), "second");
  EXPECT_EQ(model_.request_count(), 3u);
  EXPECT_EQ(model_.connection_count(), 1u) << "three requests should share one connection";
  // The model closed the connection after its answer: the next request, which finds it
  // closed, goes again on a new one, and the turn does not notice.
  auto third = prompt(sid, "three");
  ASSERT_TRUE(IsOk(third));
  EXPECT_EQ(text_of(third.json()), "third");
  EXPECT_EQ(find(third.json(), "/info/error"), nullptr) << third.describe();
  EXPECT_EQ(model_.request_count(), 4u);
  EXPECT_EQ(model_.connection_count(), 2u);
}

// Kept model connections belong to the server's event loop and wait there without anything
// pending: a SIGTERM ends the server as soon as its own connections are done, not at the
// shutdown deadline.
TEST_F(SessionProvider, KeptModelConnectionsDoNotHoldUpAShutdown) {
  start_server(openai_config());
  std::string sid = create_session();
  model_.push(kept(FakeResponse::with_text("kept")));
  ASSERT_TRUE(IsOk(prompt(sid, "hello")));
  server().send_signal(SIGTERM);
  ASSERT_TRUE(exits_zero());
  EXPECT_FALSE(contains(server().log(), "shutdown took too long")) << server().log();
}

// A forced exit (a second signal) with model connections kept: two idle ones, of which one was
// taken again by a turn that the shutdown aborts mid-request. They go with the event loop,
// before what they refer to. A silent WebSocket client (it never answers the close frame) holds
// the shutdown up until the second signal. The sanitizer builds abort (exit code not 0) on a
// use after free, and TearDown looks for their reports.
TEST_F(SessionProvider, AForcedExitClosesKeptModelConnections) {
  start_server(openai_config());
  std::string a = create_session();
  std::string b = create_session();
  // Two turns at once: two connections, both kept after their answers.
  model_.push(kept(FakeResponse::with_text("slow"), 3s));
  model_.push(kept(FakeResponse::with_text("quick")));
  prompt_async(a, "one");
  ASSERT_TRUE(model_.wait_for_request(0, 5s));
  ASSERT_TRUE(IsOk(prompt(b, "two")));
  ASSERT_TRUE(wait_until([&] { return status().empty(); }, 10s)) << str(status());
  ASSERT_EQ(model_.connection_count(), 2u);
  // A request on one of them that the model takes its time to answer.
  model_.push(kept(FakeResponse::with_text("never read"), 60s));
  prompt_async(a, "three");
  ASSERT_TRUE(model_.wait_for_request(2, 5s));
  EXPECT_EQ(model_.connection_count(), 2u);
  RawConnection silent(port());
  silent.send(ws_upgrade_request("/client-tools/ws/silent"));
  auto upgraded = silent.read_response();
  ASSERT_TRUE(upgraded && upgraded->status == 101)
      << (upgraded ? upgraded->describe() : silent.received());

  server().send_signal(SIGTERM);
  ASSERT_TRUE(server().wait_for_log("shutting down", 5s));
  server().send_signal(SIGTERM);
  ASSERT_TRUE(exits_zero());
  EXPECT_TRUE(contains(server().log(), "second signal: exiting now")) << server().log();
}

// The start-up log names the custom tools that loaded (and their files) once, and a file that
// was skipped as a warning.
TEST_F(SessionProvider, TheStartUpLogNamesLoadedCustomToolsAndWarnsAboutSkippedFiles) {
  auto dir = project_.path() / ".switchboard" / "tools";
  write_file(dir / "hello",
             "#!/bin/sh\necho '{\"description\": \"Says hello\", \"parameters\": "
             "{\"type\": \"object\"}}'\n");
  std::filesystem::permissions(dir / "hello", std::filesystem::perms::owner_all);
  write_file(dir / "broken", "#!/bin/sh\necho not json\n");
  std::filesystem::permissions(dir / "broken", std::filesystem::perms::owner_all);
  start_server(openai_config());
  std::string log = server().log();
  EXPECT_TRUE(contains(log, "INFO  custom tools: hello (" + (dir / "hello").string() + ")")) << log;
  EXPECT_TRUE(contains(log, "WARN  custom tools: " + (dir / "broken").string() + ": ")) << log;
}

// A provider whose apiKeyEnv names a variable the server does not have: said at start, and the
// model server's 401 says it again on the turn, so nobody hunts for "(none)" in the answer.
TEST_F(SessionProvider, AnUnsetApiKeyEnvIsNamedAtStartAndInTheTurnsError) {
  json::object cfg = openai_config();
  auto& fake = cfg["provider"].as_object()["fake"].as_object();
  fake.erase("apiKey");
  fake["apiKeyEnv"] = "SWITCHBOARD_TEST_UNSET_KEY";
  start_server(cfg);
  EXPECT_TRUE(contains(server().log(), "WARN"));
  EXPECT_TRUE(contains(server().log(),
                       "provider fake: provider.fake.apiKeyEnv names "
                       "SWITCHBOARD_TEST_UNSET_KEY, which is not set"))
      << server().log();
  std::string sid = create_session();
  model_.push(FakeResponse::http_error(401, "Incorrect API key provided: (none)"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  json::value v = reply.json();
  EXPECT_EQ(string_at(v, "/info/error/name"), "ProviderAuthError") << reply.describe();
  EXPECT_TRUE(
      contains(string_at(v, "/info/error/data/message"),
               "provider.fake.apiKeyEnv names SWITCHBOARD_TEST_UNSET_KEY, which is not set"))
      << reply.describe();
  auto first = model_.wait_for_request(0, 1s);
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->header("authorization")) << "a request without a key sends no header";
}

TEST_F(SessionProvider, AModelTheProviderDoesNotListIsAWarningAtStart) {
  start_server(openai_config({{"model", "fake/fake-modle"}}));
  EXPECT_TRUE(contains(server().log(), "model \"fake/fake-modle\" is not in provider.fake.models"))
      << server().log();
}

TEST_F(SessionProvider, UnauthorizedIsAProviderAuthErrorWithoutRetries) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents bus(port());
  model_.push(FakeResponse::http_error(401, "invalid api key"));
  model_.push(FakeResponse::with_text("must not be asked"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  json::value v = reply.json();
  EXPECT_EQ(string_at(v, "/info/error/name"), "ProviderAuthError") << reply.describe();
  EXPECT_TRUE(contains(string_at(v, "/info/error/data/message"), "invalid api key"))
      << reply.describe();
  EXPECT_EQ(model_.request_count(), 1u);
  auto first = model_.wait_for_request(0, 1s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->header("authorization").value_or(""), "Bearer sk-test");
  for (const auto& e : bus.until_idle(sid))
    EXPECT_NE(string_at(json::value(e), "/properties/status/type"), "retry") << str(e);
}

TEST_F(SessionProvider, StreamCutAfterTextEndsTheTurnWithAnError) {
  start_server(openai_config());
  std::string sid = create_session();
  FakeResponse cut = FakeResponse::with_text("partial answer");
  cut.cut = FakeResponse::Cut::BeforeFinish;
  model_.push(cut);
  model_.push(FakeResponse::with_text("must not be asked"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  json::value v = reply.json();
  EXPECT_EQ(string_at(v, "/info/error/name"), "APIError") << reply.describe();
  EXPECT_FALSE(string_at(v, "/info/error/data/message").empty()) << reply.describe();
  EXPECT_EQ(text_of(v), "partial answer") << "the text that came is kept";
  EXPECT_EQ(model_.request_count(), 1u) << "a stream that already produced output is not retried";
}

TEST_F(SessionProvider, StreamCutBeforeAnythingIsRetried) {
  start_server(openai_config());
  std::string sid = create_session();
  FakeResponse cut;
  cut.cut = FakeResponse::Cut::BeforeAnything;
  model_.push(cut);
  model_.push(FakeResponse::with_text("second try"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "second try") << reply.describe();
  EXPECT_EQ(find(reply.json(), "/info/error"), nullptr) << reply.describe();
  EXPECT_EQ(model_.request_count(), 2u);
}

TEST_F(SessionProvider, StreamCutMidToolCallFailsThePartWithoutRunningIt) {
  start_server(openai_config());
  std::string sid = create_session();
  fs::path marker = project_.path() / "ran.marker";
  FakeResponse cut = FakeResponse::with_tool_call(
      "call_t", "bash",
      json::object{{"command", "touch " + marker.string()}, {"description", "touch"}});
  cut.cut = FakeResponse::Cut::MidToolCall;
  model_.push(cut);
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(string_at(reply.json(), "/info/error/name"), "APIError") << reply.describe();
  auto part = tool_part(messages(sid), "call_t");
  ASSERT_TRUE(part) << "the started call has no part";
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_FALSE(fs::exists(marker)) << "a half-streamed call ran";
  EXPECT_TRUE(status().empty());
}

TEST_F(SessionProvider, AnthropicErrorsAreNamedToo) {
  json::object cfg = test_config();
  cfg["provider"] = json::object{{"claude", json::object{{"type", "anthropic"},
                                                         {"baseURL", model_.base_url()},
                                                         {"apiKey", "ak-test"},
                                                         {"models", json::array{"claude-fake"}}}}};
  cfg["model"] = "claude/claude-fake";
  cfg["retry"] = json::object{{"attempts", 1}, {"initialDelay", 10}, {"maxDelay", 20}};
  start_server(cfg);
  std::string sid = create_session();
  model_.push(FakeResponse::http_error(529, "overloaded"));
  model_.push(FakeResponse::http_error(529, "overloaded"));
  auto reply = prompt(sid, "hello");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(string_at(reply.json(), "/info/error/name"), "APIError") << reply.describe();
  EXPECT_TRUE(contains(string_at(reply.json(), "/info/error/data/message"), "overloaded"))
      << reply.describe();
  EXPECT_EQ(model_.request_count(), 2u);
}

// ---- the invalid tool ---------------------------------------------------------------------------

TEST_F(SessionTools, UnknownToolGetsTheInvalidToolsAnswer) {
  start_server(openai_config());
  model_.push(FakeResponse::with_tool_call("call_u", "teleport", json::object{{"to", "mars"}}));
  model_.push(FakeResponse::with_text("I cannot teleport."));
  std::string sid = create_session();
  auto reply = prompt(sid, "go to mars");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "I cannot teleport.");
  auto part = tool_part(messages(sid), "call_u");
  ASSERT_TRUE(part);
  json::value p(*part);
  EXPECT_EQ(string_at(p, "/tool"), "invalid") << str(p);
  EXPECT_EQ(string_at(p, "/state/status"), "completed") << str(p);
  std::string output = string_at(p, "/state/output");
  EXPECT_TRUE(contains(output, "teleport")) << output;
  EXPECT_TRUE(contains(output, "bash")) << "the output should name the available tools: " << output;
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_EQ(string_at(openai_tool_message(*second, "call_u"), "/content"), output);
}

TEST_F(SessionTools, InvalidArgumentsGetTheInvalidToolsAnswer) {
  start_server(openai_config());
  model_.push(FakeResponse::with_tool_calls(
      {FakeToolCall{"call_t", "read", R"({"offset": 2})"},
       FakeToolCall{"call_j", "read", R"({"filePath": "unterminated)"}}));
  model_.push(FakeResponse::with_text("Let me fix that."));
  std::string sid = create_session();
  auto reply = prompt(sid, "read something");
  ASSERT_TRUE(IsOk(reply));
  auto list = messages(sid);
  for (auto call : {"call_t", "call_j"}) {
    auto part = tool_part(list, call);
    ASSERT_TRUE(part) << call;
    json::value p(*part);
    EXPECT_EQ(string_at(p, "/tool"), "invalid") << str(p);
    EXPECT_EQ(string_at(p, "/state/status"), "completed") << str(p);
    EXPECT_TRUE(contains(string_at(p, "/state/output"), "invalid")) << str(p);
  }
  EXPECT_TRUE(
      contains(string_at(json::value(*tool_part(list, "call_t")), "/state/output"), "filePath"))
      << str(list);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  for (auto call : {"call_t", "call_j"})
    EXPECT_TRUE(openai_tool_message(*second, call).is_object()) << call << ": " << second->body;
}

// The agent's step limit: its last step may call no tools (tool_choice "none"; the tools stay
// described, as Anthropic refuses a history of tool_use blocks without them) and the model is
// told so: the turn ends with its text (it ended with a tool call whose result the model never
// saw, and no answer). Both wire formats.
TEST_F(SessionTurn, TheLastStepOfTheAgentsLimitCallsNoToolsAndEndsWithText) {
  for (bool anthropic : {false, true}) {
    SCOPED_TRACE(anthropic ? "anthropic" : "openai");
    json::object cfg =
        openai_config(json::object{{"agent", json::object{{"build", json::object{{"steps", 2}}}}}});
    if (anthropic) {
      cfg["provider"] =
          json::object{{"claude", json::object{{"type", "anthropic"},
                                               {"baseURL", model_.base_url()},
                                               {"apiKey", "ak-test"},
                                               {"models", json::array{"claude-fake"}}}}};
      cfg["model"] = "claude/claude-fake";
    }
    start_server(cfg);
    std::size_t before = model_.request_count();
    write_file(project_.path() / "notes.txt", "alpha\n");
    model_.push(
        FakeResponse::with_tool_call("call_1", "read", json::object{{"filePath", "notes.txt"}}));
    model_.push(FakeResponse::with_text("I read notes.txt; nothing is left."));
    std::string sid = create_session();
    auto reply = prompt(sid, "read it");
    ASSERT_TRUE(IsOk(reply));
    EXPECT_EQ(text_of(reply.json()), "I read notes.txt; nothing is left.") << reply.describe();
    EXPECT_EQ(find(reply.json(), "/info/error"), nullptr) << reply.describe();
    auto first = model_.wait_for_request(before, 1s),
         last = model_.wait_for_request(before + 1, 1s);
    ASSERT_TRUE(first && last);
    EXPECT_EQ(find(first->json, "/tool_choice"), nullptr) << first->body.substr(0, 2000);
    EXPECT_NE(find(last->json, "/tools"), nullptr) << last->body.substr(0, 2000);
    if (anthropic) {
      EXPECT_EQ(string_at(last->json, "/tool_choice/type"), "none") << last->body.substr(0, 2000);
      EXPECT_TRUE(contains(string_at(last->json, "/system"), "last step"));
    } else {
      EXPECT_EQ(string_at(last->json, "/tool_choice"), "none") << last->body.substr(0, 2000);
      EXPECT_TRUE(contains(string_at(last->json, "/messages/0/content"), "last step"));
      EXPECT_TRUE(openai_tool_message(*last, "call_1").is_object()) << "the result is missing";
    }
    EXPECT_TRUE(contains(last->body, "alpha")) << "the result did not reach the model";
    EXPECT_EQ(model_.request_count(), before + 2);
    server_.reset();
  }
}

// A long output is cut with a note that says where the rest is; following the note (a read of
// the saved file) needs nobody's approval: a headless server (permission.timeout) rejected it.
TEST_F(SessionTurn, TheTruncationNoteCanBeFollowedWithoutAnAsk) {
  start_server(openai_config(json::object{{"permission", json::object{{"timeout", 1000}}}}));
  auto t = tool_turn("bash", json::object{{"command", "seq 1 3000"}, {"description", "Count"}});
  expect_tool_turn_completed(t, "bash");
  json::value part(t.part);
  EXPECT_EQ(value_at(part, "/state/metadata/truncated"), true) << str(part);
  std::string saved = string_at(part, "/state/metadata/outputPath");
  ASSERT_FALSE(saved.empty()) << str(part);
  EXPECT_TRUE(contains(string_at(part, "/state/output"), saved)) << "the note does not name it";

  BusEvents bus(port());
  model_.push(FakeResponse::with_tool_call(
      "call_rest", "read", json::object{{"filePath", saved}, {"offset", 2000}, {"limit", 5}}));
  model_.push(FakeResponse::with_text("Read the rest."));
  auto reply = prompt(t.session, "read the rest");
  ASSERT_TRUE(IsOk(reply));
  auto rest = tool_part(messages(t.session), "call_rest");
  ASSERT_TRUE(rest);
  json::value r(*rest);
  EXPECT_EQ(string_at(r, "/state/status"), "completed") << str(r);
  EXPECT_TRUE(contains(string_at(r, "/state/output"), "2001")) << str(r);
  for (const auto& e : bus.until_idle(t.session))
    EXPECT_NE(string_at(json::value(e), "/type"), "permission.asked") << str(json::value(e));
}

// The rule that lets a session read its saved outputs is an agent default: the config's rules
// for the agent come after it and may still deny it.
TEST_F(SessionTurn, AnAgentsOwnRuleCanStillDenyReadingSavedOutputs) {
  start_server(openai_config(json::object{
      {"agent",
       json::object{{"build", json::object{{"permission",
                                            json::object{{"external_directory", "deny"}}}}}}}}));
  auto t = tool_turn("bash", json::object{{"command", "seq 1 3000"}, {"description", "Count"}});
  std::string saved = string_at(json::value(t.part), "/state/metadata/outputPath");
  ASSERT_FALSE(saved.empty()) << str(t.part);
  model_.push(FakeResponse::with_tool_call("call_rest", "read",
                                           json::object{{"filePath", saved}, {"offset", 2000}}));
  model_.push(FakeResponse::with_text("Could not."));
  auto reply = prompt(t.session, "read the rest");
  ASSERT_TRUE(IsOk(reply));
  auto rest = tool_part(messages(t.session), "call_rest");
  ASSERT_TRUE(rest);
  EXPECT_EQ(string_at(json::value(*rest), "/state/status"), "error") << str(*rest);
}

// read keeps within its own limits and tells the model how to go on in the file; it is not cut
// again (2,000 lines plus its frame went over the 2,000-line limit: the last lines and read's
// own note were lost, and the model was sent to a saved copy instead of the file).
TEST_F(SessionTurn, AReadOfALongFileIsCutOnceByReadItself) {
  start_server(openai_config());
  std::string text;
  for (int i = 1; i <= 2500; ++i) {
    text += "line ";
    text += std::to_string(i);
    text += '\n';
  }
  write_file(project_.path() / "long.txt", text);
  auto t = tool_turn("read", json::object{{"filePath", "long.txt"}});
  expect_tool_turn_completed(t, "read");
  json::value part(t.part);
  std::string output = string_at(part, "/state/output");
  EXPECT_TRUE(contains(output, "line 2000\n")) << output.substr(output.size() - 300);
  EXPECT_FALSE(contains(output, "line 2001\n"));
  EXPECT_TRUE(contains(output, "offset")) << output.substr(output.size() - 300);
  EXPECT_FALSE(contains(output, "truncate")) << output.substr(output.size() - 300);
  EXPECT_EQ(value_at(part, "/state/metadata/truncated"), true) << str(part);
  EXPECT_EQ(find(part, "/state/metadata/outputPath"), nullptr) << str(part);
}

// A tool that cut its own results says so in metadata.truncated, also when its output is within
// the processor's limits (it was overwritten with false).
TEST_F(SessionTurn, WhatAToolCutItselfStaysSaidInItsMetadata) {
  start_server(openai_config());
  for (int i = 0; i < 150; ++i) {
    std::string name = "f";
    name += std::to_string(i);
    name += ".txt";
    write_file(project_.path() / "many" / name, "x\n");
  }
  auto t = tool_turn("glob", json::object{{"pattern", "many/*.txt"}});
  expect_tool_turn_completed(t, "glob");
  json::value part(t.part);
  EXPECT_EQ(value_at(part, "/state/metadata/truncated"), true) << str(part);
  EXPECT_EQ(value_at(part, "/state/metadata/total"), 150) << str(part);
}

// ---- faults
// ---------------------------------------------------------------------------------------

class SessionFaults : public SessionTest {};

// The disk fills up while the full output of a long tool call is being saved: the model still
// gets the head of the output and is told the rest could not be saved; the turn and the server go
// on, and no partial file is left behind.
TEST_F(SessionFaults, AFullDiskForTheTruncationFileStillEndsTheCallWithItsHead) {
  ServerProcess::Options options;
  options.config = openai_config();
  options.data_dir = data_.path();
  options.directory = project_.path();
  // Writes past 2 MiB of one file fail with EFBIG, as on a full disk. The database stays far
  // below that in this test; the 3 MB output does not.
  options.max_file_bytes = 2 * 1024 * 1024;
  server_.emplace(std::move(options));

  auto t = tool_turn("bash", json::object{{"command", "head -c 3000000 /dev/zero | tr '\\0' x"},
                                          {"description", "Print a lot"}});
  expect_tool_turn_completed(t, "bash");
  json::value part(t.part);
  std::string output = string_at(part, "/state/output");
  EXPECT_LE(output.size(), 60u * 1024) << "the model was sent more than the truncation limit";
  EXPECT_TRUE(contains(output, "xxxxxxxxxx")) << "the head of the output is missing";
  EXPECT_TRUE(contains(output, "could not be saved")) << output.substr(output.size() - 400);
  EXPECT_EQ(value_at(part, "/state/metadata/truncated"), true) << str(part);
  EXPECT_EQ(find(part, "/state/metadata/outputPath"), nullptr) << str(part);
  std::size_t saved_files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(data_.path()))
    if (entry.is_regular_file() && contains(entry.path().string(), "truncate")) ++saved_files;
  EXPECT_EQ(saved_files, 0u) << "a partly written output file was left in the data directory";

  // The server goes on: the next turn works and is stored (its prompt and its answer).
  std::size_t stored = messages(t.session).size();
  model_.push(FakeResponse::with_text("still here"));
  auto reply = prompt(t.session, "hello again");
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "still here");
  EXPECT_EQ(messages(t.session).size(), stored + 2);
}

// ---- restarts -----------------------------------------------------------------------------------

class SessionRestart : public SessionTest {
 protected:
  // Starts the server again on the same data directory and checks what the turn of `sid` left:
  // the user's message and an assistant message ended with a named error, whose call `call_id`
  // is stored failed, not running.
  void expect_turn_failed_after_restart(const std::string& sid, const std::string& call_id) {
    server_.reset();
    start_server(openai_config());
    auto list = messages(sid);
    ASSERT_EQ(list.size(), 2u) << str(list);
    EXPECT_FALSE(string_at(list[1], "/info/error/name").empty()) << str(list[1]);
    auto part = tool_part(list, call_id);
    ASSERT_TRUE(part) << "the call is gone after the restart: " << str(list);
    EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  }

  // A config whose model answers "first answer", then "second answer".
  json::object two_answers_config() {
    json::object cfg = test_config();
    cfg["provider"] = json::object{
        {"s", json::object{{"type", "scripted"},
                           {"script", json::array{json::object{{"text", "first answer"}},
                                                  json::object{{"text", "second answer"}}}}}}};
    cfg["model"] = "s/default";
    return cfg;
  }

  // Starts the server with `cfg` on the test's own PostgreSQL.
  void start_on(const OwnService& pg, const json::object& cfg) {
    ServerProcess::Options options;
    options.config = cfg;
    options.data_dir = data_.path();
    options.directory = project_.path();
    options.env = {"SWITCHBOARD_DATABASE_URL=" + pg.url()};
    server_.emplace(std::move(options));
  }
};

// A turn that waits for its model when the server crashes ends failed after the restart (a
// turn waiting for a client goes on instead: AClientCallWaitsThroughACrash...).
TEST_F(SessionRestart, CrashMidTurnLeavesNothingRunning) {
  json::object cfg = test_config();
  cfg["provider"] = json::object{
      {"slow", json::object{{"type", "scripted"},
                            {"script",
                             json::array{json::object{{"delayMs", 30000}, {"text", "too late"}}}}}},
      {"tooly",
       json::object{
           {"type", "scripted"},
           {"script",
            json::array{json::object{
                {"toolCalls", json::array{json::object{
                                  {"tool", "bash"},
                                  {"input", json::object{{"command", "touch started && sleep 30"},
                                                         {"description", "wait"}}}}}}}}}}}};
  cfg["model"] = "slow/default";
  start_server(cfg);
  std::string waiting_for_model = create_session(json::object{{"title", "model"}});
  std::string waiting_for_tool = create_session(json::object{{"title", "tool"}});
  {
    BusEvents bus(port());
    prompt_async(waiting_for_model, "take your time");
    ASSERT_TRUE(
        bus.next_where("message.part.updated", "/properties/part/type", json::value("step-start")));
    json::object body = text_prompt("run the command");
    body["model"] = "tooly/default";
    prompt_async(waiting_for_tool, body);
    ASSERT_TRUE(
        wait_until([&] { return std::filesystem::exists(project_.path() / "started"); }, 10s))
        << "the command did not start";
    json::object st = status();
    ASSERT_EQ(st.size(), 2u) << str(st);
    // What GET .../message lists is stored (it stores what waits first): a crash from here on
    // cannot lose it.
    for (const auto& sid : {waiting_for_model, waiting_for_tool})
      ASSERT_EQ(messages(sid).size(), 2u) << "the turn in progress is not listed";

    server().send_signal(SIGKILL);
    auto exited = server().wait_exit(5s);
    ASSERT_TRUE(exited && exited->signaled) << "SIGKILL did not end the server";
  }
  server_.reset();

  start_server(cfg);
  EXPECT_TRUE(contains(server().log(), "interrupted")) << "the restart did not mention the turns";
  auto sessions = http_get(port(), "/session");
  ASSERT_TRUE(IsOk(sessions));
  std::set<std::string> ids;
  json::value session_list = sessions.json();
  for (const auto& s : session_list.as_array())
    ids.insert(string_at(s, "/id"));
  EXPECT_TRUE(ids.count(waiting_for_model) && ids.count(waiting_for_tool)) << sessions.describe();
  EXPECT_TRUE(status().empty()) << str(status());

  for (const auto& sid : {waiting_for_model, waiting_for_tool}) {
    auto list = messages(sid);
    ASSERT_EQ(list.size(), 2u) << str(list);
    EXPECT_EQ(string_at(list[0], "/info/role"), "user");
    const json::value& assistant = list[1];
    EXPECT_EQ(string_at(assistant, "/info/role"), "assistant");
    EXPECT_FALSE(string_at(assistant, "/info/error/name").empty())
        << "the interrupted message has no error: " << str(assistant);
    EXPECT_NE(find(assistant, "/info/time/completed"), nullptr) << str(assistant);
    for (const auto& p : parts_of(list)) {
      std::string st = string_at(json::value(p), "/state/status");
      EXPECT_TRUE(st != "running" && st != "pending") << "a part is left " << st << ": " << str(p);
    }
  }
  int tool_parts = 0;
  for (const auto& p : parts_of(messages(waiting_for_tool))) {
    if (string_at(json::value(p), "/type") != "tool") continue;
    ++tool_parts;
    EXPECT_EQ(string_at(json::value(p), "/state/status"), "error") << str(p);
  }
  EXPECT_EQ(tool_parts, 1) << "the command's part is gone";

  // The session takes a new prompt.
  json::object again = text_prompt("are you there?");
  again["model"] = "scripted/default";
  auto reply = http_post(port(), "/session/" + waiting_for_model + "/message", again);
  ASSERT_TRUE(IsOk(reply));
  EXPECT_EQ(text_of(reply.json()), "Echo: are you there?");
}

// A turn's progress reaches the store by itself, shortly after it happens (the server gathers a
// turn's writes for a moment so that a fast turn is one transaction): nothing reads the session
// before the crash here, the test only watches the database's write-ahead log grow.
TEST_F(SessionRestart, ATurnInProgressIsStoredWithoutBeingAskedFor) {
  json::object cfg = test_config();
  cfg["provider"] = json::object{
      {"slow", json::object{{"type", "scripted"},
                            {"script", json::array{json::object{{"delayMs", 30000},
                                                                {"text", "too late"}}}}}}};
  cfg["model"] = "slow/default";
  start_server(cfg);
  std::string sid = create_session();
  // What shows a write: SQLite's log grows, or PostgreSQL has the turn's open message.
  auto wal = data_.path() / "switchboard.db-wal";
  auto wal_size = [&] {
    if (test::storage_is_postgres())
      return static_cast<std::uintmax_t>(std::stoull(test::postgres_query(
          test::postgres_store_url(data_.path().string()),
          "SELECT count(*) FROM message WHERE completed = 0 AND session_id = '" + sid + "'")));
    std::error_code ec;
    auto size = std::filesystem::file_size(wal, ec);
    return ec ? std::uintmax_t{0} : size;
  };
  auto before = wal_size();
  {
    BusEvents bus(port());
    prompt_async(sid, "take your time");
    ASSERT_TRUE(
        bus.next_where("message.part.updated", "/properties/part/type", json::value("step-start")));
  }
  ASSERT_TRUE(wait_until([&] { return wal_size() > before; }, 10s))
      << "nothing of the running turn was stored";
  server().send_signal(SIGKILL);
  auto exited = server().wait_exit(5s);
  ASSERT_TRUE(exited && exited->signaled) << "SIGKILL did not end the server";
  server_.reset();
  start_server(cfg);
  auto list = messages(sid);
  ASSERT_EQ(list.size(), 2u) << str(list);
  EXPECT_EQ(text_of(list[0]), "take your time") << str(list[0]);
  EXPECT_EQ(string_at(list[1], "/info/error/name"), "MessageAbortedError") << str(list[1]);
}

// A PostgreSQL of the test's own (scripts/test-services.sh with a state directory of its own),
// which the test takes down and brings up without touching the one the pass shares.
// PostgreSQL goes away under a running server and comes back: meanwhile what needs the store
// answers 503 naming it (and /health says so, for a load balancer), what does not is served; once
// it is back the server reconnects by itself, and nothing stored before or after is missing.
TEST_F(SessionRestart, APostgresOutageIs503NamingItAndTheServerReconnectsWithEverything) {
  OwnService pg("postgres");
  json::object cfg = two_answers_config();
  auto start = [&] { start_on(pg, cfg); };
  start();
  std::string sid = create_session();
  ASSERT_TRUE(IsOk(prompt(sid, "hello")));
  ASSERT_EQ(messages(sid).size(), 2u);

  pg.run("down");
  auto health = http_get(port(), "/health");
  EXPECT_EQ(health.status, 503u) << health.describe();
  EXPECT_EQ(string_at(health.json(), "/storage/engine"), "postgres") << health.describe();
  EXPECT_EQ(health.json().at_pointer("/storage/ok"), json::value(false)) << health.describe();
  EXPECT_TRUE(contains(string_at(health.json(), "/storage/error"), "postgres"))
      << health.describe();
  EXPECT_TRUE(
      IsError(http_get(port(), "/session/" + sid + "/message"), 503, "UNAVAILABLE", {"postgres"}));
  EXPECT_TRUE(IsOk(http_get(port(), "/config"))) << "what needs no store is still served";
  EXPECT_TRUE(IsOk(http_get(port(), "/agent")));

  pg.run("up");
  ASSERT_TRUE(wait_until([&] { return http_get(port(), "/health").status == 200; }, 10s))
      << "the server did not reconnect";
  auto list = messages(sid);
  ASSERT_EQ(list.size(), 2u) << str(list);
  EXPECT_EQ(text_of(list[1]), "first answer");
  ASSERT_TRUE(IsOk(prompt(sid, "again")));
  server_.reset();
  start();
  list = messages(sid);
  ASSERT_EQ(list.size(), 4u) << str(list);
  EXPECT_EQ(text_of(list[3]), "second answer");
}

// A PostgreSQL that hangs (its processes stopped: connections are accepted and what is sent is
// acknowledged, nothing answers) holds up only the requests that need it, one statement's time
// at most: the request that finds it fails with a 503 naming postgres once statementTimeout + 2 s
// have passed, and meanwhile the server serves what needs no store (the statement waits on the
// store's thread, not on the event loop). From then on nothing waits for it (a new connection is
// made in the background, for up to connectTimeout a try): what needs the store fails at once, what
// does not is served, /health says so; once it answers again the server goes on by itself, with
// everything.
TEST_F(SessionRestart, AHungPostgresHoldsTheServerUpForOneStatementAtMost) {
  OwnService pg("postgres");
  json::object cfg = two_answers_config();
  cfg["storage"] = json::object{{"statementTimeout", 500}, {"connectTimeout", 20000}};
  start_on(pg, cfg);
  std::string sid = create_session();
  ASSERT_TRUE(IsOk(prompt(sid, "hello")));

  pg.run("freeze");
  auto took = [](const std::function<void()>& request) {
    auto started = Clock::now();
    request();
    return Clock::now() - started;
  };
  Clock::duration first{};
  std::atomic<bool> answered{false};
  std::thread waiting([&] {
    first = took([&] {
      EXPECT_TRUE(IsError(http_get(port(), "/session/" + sid + "/message"), 503, "UNAVAILABLE",
                          {"postgres", "no answer within 2500 ms"}));
    });
    answered = true;
  });
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(answered) << "the request did not wait for the hung server at all";
  auto beside = took([&] { EXPECT_TRUE(IsOk(http_get(port(), "/config"))); });
  EXPECT_LT(beside, 1s) << "a request that needs no store waited for the one that does";
  EXPECT_FALSE(answered) << "/config was not served while the store's statement waited";
  waiting.join();
  EXPECT_LT(first, 6s) << "the statement waited past its time";
  // A connect to the hung server waits for up to 20 s: none of these does.
  for (int i = 0; i < 3; ++i) {
    auto next = took([&] {
      EXPECT_TRUE(IsError(http_get(port(), "/session/" + sid + "/message"), 503, "UNAVAILABLE",
                          {"postgres"}));
      auto health = http_get(port(), "/health");
      EXPECT_EQ(health.status, 503u) << health.describe();
      EXPECT_EQ(health.json().at_pointer("/storage/ok"), json::value(false)) << health.describe();
      EXPECT_TRUE(IsOk(http_get(port(), "/config"))) << "what needs no store is served";
    });
    EXPECT_LT(next, 2s) << "a request waited for the hung server";
  }

  pg.run("thaw");
  ASSERT_TRUE(wait_until([&] { return http_get(port(), "/health").status == 200; }, 30s))
      << "the server did not connect again";
  ASSERT_TRUE(IsOk(prompt(sid, "again")));
  auto list = messages(sid);
  ASSERT_EQ(list.size(), 4u) << str(list);
  EXPECT_EQ(text_of(list[1]), "first answer");
  EXPECT_EQ(text_of(list[3]), "second answer");
}

// A turn that starts reads the store (its session, its claim) while the event loop goes on: a
// second prompt of the session meanwhile is refused at once (409), not queued behind the first
// nor run beside it. PostgreSQL is frozen so that the first start waits.
TEST_F(SessionRestart, ASecondPromptWhileTheFirstStartsIsAConflict) {
  OwnService pg("postgres");
  json::object cfg = two_answers_config();
  cfg["storage"] = json::object{{"statementTimeout", 500}, {"connectTimeout", 20000}};
  start_on(pg, cfg);
  std::string sid = create_session();

  pg.run("freeze");
  std::atomic<bool> first_answered{false};
  std::thread first([&] {
    EXPECT_TRUE(IsError(prompt(sid, "hello"), 503, "UNAVAILABLE", {"postgres"}));
    first_answered = true;
  });
  std::this_thread::sleep_for(500ms);
  auto started = Clock::now();
  EXPECT_TRUE(IsError(prompt(sid, "again"), 409, "CONFLICT", {"busy"}));
  EXPECT_LT(Clock::now() - started, 1s) << "the second prompt waited for the first one's start";
  EXPECT_FALSE(first_answered) << "the first prompt did not wait for the frozen store";
  first.join();

  pg.run("thaw");
  ASSERT_TRUE(wait_until([&] { return http_get(port(), "/health").status == 200; }, 30s))
      << "the server did not connect again";
  ASSERT_TRUE(IsOk(prompt(sid, "hello")));
  auto list = messages(sid);
  ASSERT_EQ(list.size(), 2u) << str(list);
  EXPECT_EQ(text_of(list[1]), "first answer");
}

// A server tool that is still running is in the store as running (GET .../message reads the
// store) while it runs, so a crash then leaves it failed after the restart, not missing.
TEST_F(SessionRestart, CrashDuringAServerToolLeavesItFailed) {
  start_server(openai_config());
  std::string sid = create_session();
  model_.push(FakeResponse::with_tool_call(
      "call_s", "bash",
      json::object{{"command", "touch started && sleep 20"}, {"description", "Wait"}}));
  prompt_async(sid, "run it");
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(project_.path() / "started"); }, 10s))
      << "the command did not start";
  auto running = tool_part(messages(sid), "call_s");
  ASSERT_TRUE(running) << "the running call is not stored";
  EXPECT_EQ(string_at(json::value(*running), "/state/status"), "running") << str(*running);

  server().send_signal(SIGKILL);
  auto exited = server().wait_exit(5s);
  ASSERT_TRUE(exited && exited->signaled) << "SIGKILL did not end the server";
  expect_turn_failed_after_restart(sid, "call_s");
}

// A step that still runs a server tool cannot wait through a stop (the command ends with the
// server): the turn is aborted, its client call cancelled at the client, nothing left running.
TEST_F(SessionRestart, StopDuringAServerToolCancelsTheClientCallOfItsStep) {
  start_server(openai_config());
  std::string sid = create_session();
  auto ws = connect_client(sid, {tool_def("wait")});
  model_.push(FakeResponse::with_tool_calls(
      {FakeToolCall{"call_s", "bash", R"({"command": "sleep 30", "description": "wait"})"},
       FakeToolCall{"call_w", "client_c1_wait", R"({"text": "x"})"}}));
  prompt_async(sid, "wait for both");
  json::object req = next_ws_request(*ws);

  server().send_signal(SIGTERM);
  auto cancel = ws->next_message_of_type("cancel", 5s);
  EXPECT_TRUE(cancel) << "the client was not told that the server gave up its call";
  if (cancel) {
    EXPECT_EQ(value_at(*cancel, "/requestID"), req.at("requestID")) << str(*cancel);
  }
  auto exited = server().wait_exit(10s);
  ASSERT_TRUE(exited && exited->exited && exited->code == 0)
      << (exited ? exited->describe() : "still running");
  expect_turn_failed_after_restart(sid, "call_w");
  EXPECT_TRUE(status().empty());
}

// ---- durable waits (design.md decision 5) ----------------------------------------------------

class SessionDurableWait : public SessionRestart {
 protected:
  // SIGTERM, and the server exits 0 (what it keeps is stored by then).
  void stop_cleanly() {
    server().send_signal(SIGTERM);
    auto exited = server().wait_exit(10s);
    ASSERT_TRUE(exited && exited->exited && exited->code == 0)
        << (exited ? exited->describe() : "still running");
  }

  // The config with clientTools.<key> = value.
  json::object with_client_tools(json::object cfg, std::string_view key, json::value value) {
    cfg["clientTools"].as_object()[key] = std::move(value);
    return cfg;
  }

  // Waits until the session is idle and its last message is a completed assistant message.
  // The status is read first: a turn is idle only once its last message is listed, whereas a
  // list read first may be of the moment between two steps (the first completed, the next not
  // yet begun) and the status read after it of the moment the turn has ended.
  json::array wait_turn_end(const std::string& sid, std::chrono::milliseconds timeout = 15s) {
    json::array list;
    bool ended = wait_until(
        [&] {
          bool idle = status().empty();
          list = messages(sid);
          return idle && !list.empty() && string_at(list.back(), "/info/role") == "assistant" &&
                 find(list.back(), "/info/time/completed") != nullptr;
        },
        timeout);
    if (!ended) throw std::runtime_error("the turn of " + sid + " did not end: " + str(list));
    return list;
  }
};

// A turn whose step waits for a client outlives a stop: the client is not cancelled, after the
// restart the call is still running and the session busy, the client that connects again gets
// the same request, its answer is taken, and the model goes on from both results of the step
// (the server tool's, which ended before the stop, and the client's) as if nothing happened.
TEST_F(SessionDurableWait, AStopKeepsAClientCallWaitingAndTheTurnGoesOnWithItsAnswer) {
  start_server(openai_config());
  std::string sid = create_session();
  std::string request_id;
  {
    auto ws = connect_client(sid, {tool_def("wait")});
    BusEvents bus(port());
    model_.push(FakeResponse::with_tool_calls(
        {FakeToolCall{"call_s", "bash", R"({"command": "echo served", "description": "echo"})"},
         FakeToolCall{"call_w", "client_c1_wait", R"({"text": "x"})"}}));
    model_.push(FakeResponse::with_text("Done after the restart."));
    prompt_async(sid, "wait for the client");
    json::object req = next_ws_request(*ws);
    request_id = string_at(json::value(req), "/requestID");
    ASSERT_TRUE(wait_part_status(bus, "call_s", "completed"));

    ASSERT_NO_FATAL_FAILURE(stop_cleanly());
    EXPECT_FALSE(ws->next_message_of_type("cancel", 100ms))
        << "the client was told to give up a call that goes on";
  }
  server_.reset();
  start_server(openai_config());
  EXPECT_TRUE(contains(server().log(), "go on")) << server().log();
  json::object st = status();
  EXPECT_EQ(string_at(json::value(st), "/" + sid + "/type"), "busy") << str(st);
  auto waiting = tool_part(messages(sid), "call_w");
  ASSERT_TRUE(waiting) << str(messages(sid));
  EXPECT_EQ(string_at(json::value(*waiting), "/state/status"), "running") << str(*waiting);

  // The client has no tools registered on this server yet: the request reaches it anyway.
  auto ws = std::make_unique<WsClient>(port(), "/client-tools/ws/c1");
  json::object again = next_ws_request(*ws);
  EXPECT_EQ(string_at(json::value(again), "/requestID"), request_id) << str(again);
  EXPECT_EQ(string_at(json::value(again), "/callID"), "call_w") << str(again);
  EXPECT_EQ(string_at(json::value(again), "/sessionID"), sid) << str(again);
  EXPECT_EQ(again.at("input"), (json::object{{"text", "x"}})) << str(again);
  ws->send_json(json::object{{"type", "result"},
                             {"requestID", request_id},
                             {"status", "success"},
                             {"output", "answered after the restart"}});
  json::array list = wait_turn_end(sid);

  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_EQ(string_at(openai_tool_message(*second, "call_w"), "/content"),
            "answered after the restart")
      << second->body;
  EXPECT_TRUE(contains(string_at(openai_tool_message(*second, "call_s"), "/content"), "served"))
      << second->body;
  // Both calls in one assistant message, as the model made them, and the user's question once.
  EXPECT_EQ(array_at(openai_call_message(*second, "call_s"), "/tool_calls").size(), 2u)
      << second->body;
  EXPECT_EQ(user_texts(*second), std::vector<std::string>{"wait for the client"}) << second->body;
  EXPECT_EQ(model_.request_count(), 2u);

  ASSERT_EQ(list.size(), 3u) << str(list);
  EXPECT_EQ(find(list[1], "/info/error"), nullptr) << str(list[1]);
  EXPECT_EQ(string_at(list[1], "/info/finish"), "tool-calls") << str(list[1]);
  auto answered = tool_part(list, "call_w");
  ASSERT_TRUE(answered);
  EXPECT_EQ(string_at(json::value(*answered), "/state/status"), "completed") << str(*answered);
  EXPECT_EQ(text_of(list[2]), "Done after the restart.");
  // Answered once: a second answer is refused.
  auto repeat =
      http_post(port(), "/client-tools/result",
                json::object{{"requestID", request_id},
                             {"clientID", "c1"},
                             {"result", json::object{{"status", "success"}, {"output", "again"}}}});
  EXPECT_EQ(repeat.status, 409u) << repeat.describe();
}

// The same after a crash, over SSE: the call was stored while it waited; a client whose
// Last-Event-ID says it has the request is not sent it again and may answer it; the turn goes on.
TEST_F(SessionDurableWait, AClientCallWaitsThroughACrashAndItsClientMayAnswerItAfterwards) {
  json::object cfg = with_client_tools(openai_config(), "reconnectGrace", 10000);
  start_server(cfg);
  std::string sid = create_session();
  register_tools(port(), "c1", {tool_def("wait")});
  std::string request_id, event_id;
  {
    SseClient stream(port(), "/client-tools/pending/c1");
    model_.push(FakeResponse::with_tool_call("call_w", "client_c1_wait", json::object{}));
    model_.push(FakeResponse::with_text("Went on."));
    prompt_async(sid, "wait for the client");
    auto request = stream.next_event_named("tool-request", 5s);
    ASSERT_TRUE(request && request->id);
    event_id = *request->id;
    request_id = string_at(request->json(), "/requestID");
    // Listed, so stored (GET .../message stores what waits first).
    auto part = tool_part(messages(sid), "call_w");
    ASSERT_TRUE(part);
    ASSERT_EQ(string_at(json::value(*part), "/state/status"), "running") << str(*part);
    server().send_signal(SIGKILL);
    auto exited = server().wait_exit(5s);
    ASSERT_TRUE(exited && exited->signaled) << "SIGKILL did not end the server";
  }
  server_.reset();
  start_server(cfg);

  SseClient::Options had_it;
  had_it.last_event_id = event_id;
  SseClient stream(port(), "/client-tools/pending/c1", had_it);
  EXPECT_FALSE(stream.next_event_named("tool-request", 300ms))
      << "a request the client had (its Last-Event-ID) was sent again";
  auto answer = http_post(
      port(), "/client-tools/result",
      json::object{
          {"requestID", request_id},
          {"clientID", "c1"},
          {"result", json::object{{"status", "success"}, {"output", "from before the crash"}}}});
  ASSERT_EQ(answer.status, 200u) << answer.describe();
  json::array list = wait_turn_end(sid);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_EQ(string_at(openai_tool_message(*second, "call_w"), "/content"), "from before the crash")
      << second->body;
  EXPECT_EQ(text_of(list.back()), "Went on.");

  // New requests have later event ids than the ones before the crash. (The client registers its
  // tools again, as the SDKs do when they reconnect: this server has not seen them.)
  register_tools(port(), "c1", {tool_def("wait")});
  model_.push(FakeResponse::with_tool_call("call_2", "client_c1_wait", json::object{}));
  model_.push(FakeResponse::with_text("Again."));
  prompt_async(sid, "once more");
  auto next = stream.next_event_named("tool-request", 5s);
  ASSERT_TRUE(next && next->id);
  EXPECT_GT(std::stoull(*next->id), std::stoull(event_id)) << "event ids went back after a restart";
}

// Until the call's timeout, counted from its start before the restart: a call whose deadline
// passed while the server was down ends at once as a call that nobody answered, and the model is
// told so.
TEST_F(SessionDurableWait, AWaitingCallStillTimesOutAfterARestart) {
  json::object cfg = with_client_tools(openai_config(), "defaultTimeout", 3000);
  start_server(cfg);
  std::string sid = create_session();
  Clock::time_point called;
  {
    auto ws = connect_client(sid, {tool_def("wait")});
    model_.push(FakeResponse::with_tool_call("call_w", "client_c1_wait", json::object{}));
    model_.push(FakeResponse::with_text("Nobody answered."));
    prompt_async(sid, "wait for the client");
    next_ws_request(*ws);
    called = Clock::now();
    ASSERT_NO_FATAL_FAILURE(stop_cleanly());
  }
  server_.reset();
  std::this_thread::sleep_until(called + 3500ms);  // the deadline passes while it is down
  start_server(cfg);
  auto restarted = Clock::now();
  json::array list = wait_turn_end(sid);
  EXPECT_LT(Clock::now() - restarted, 2500ms) << "the deadline started over with the restart";
  auto part = tool_part(list, "call_w");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_TRUE(contains(string_at(json::value(*part), "/state/error"), "timed out")) << str(*part);
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_TRUE(contains(string_at(openai_tool_message(*second, "call_w"), "/content"), "timed out"))
      << second->body;
  EXPECT_EQ(text_of(list.back()), "Nobody answered.");
}

// An ask, then the client call it allows, each through a stop: the second restart resumes the
// client call (not the ask again), the turn ends with its answer, and a third start finds nothing
// left to resume.
TEST_F(SessionDurableWait, AnAskAndThenTheClientCallItAllowsEachWaitThroughAStop) {
  json::object cfg =
      openai_config(json::object{{"permission", json::object{{"client_tools", "ask"}}}});
  auto stop = [&] {
    ASSERT_NO_FATAL_FAILURE(stop_cleanly());
    server_.reset();
    start_server(cfg);
  };
  start_server(cfg);
  std::string sid = create_session();
  std::string ask_id;
  {
    auto ws = connect_client(sid, {tool_def("wait")});
    BusEvents bus(port());
    model_.push(FakeResponse::with_tool_call("call_w", "client_c1_wait", json::object{}));
    model_.push(FakeResponse::with_text("Done."));
    prompt_async(sid, "ask, then wait for the client");
    auto asked = bus.next("permission.asked");
    ASSERT_TRUE(asked);
    ask_id = string_at(json::value(*asked), "/properties/id");
    EXPECT_EQ(string_at(json::value(*asked), "/properties/permission"), "client_tools");
    stop();
  }
  std::string request_id;
  {
    auto ws = connect_client(sid, {tool_def("wait")});  // as a client does when it reconnects
    ASSERT_TRUE(
        wait_until([&] { return !http_get(port(), "/permission").json().as_array().empty(); }, 5s));
    auto replied =
        http_post(port(), "/permission/" + ask_id + "/reply", json::object{{"reply", "once"}});
    ASSERT_TRUE(IsOk(replied)) << replied.describe();
    request_id = string_at(json::value(next_ws_request(*ws)), "/requestID");
    stop();  // with the client connected (without a grace, its leaving would end the call)
  }
  EXPECT_EQ(http_get(port(), "/permission").json(), json::array{}) << "the ask came back";
  {
    // The request comes first on the connection (before a registration's answer).
    auto ws = std::make_unique<WsClient>(port(), "/client-tools/ws/c1");
    json::object again = next_ws_request(*ws);
    EXPECT_EQ(string_at(json::value(again), "/requestID"), request_id) << str(again);
    ws->send_json(json::object{{"type", "result"},
                               {"requestID", request_id},
                               {"status", "success"},
                               {"output", "waited twice"}});
    json::array list = wait_turn_end(sid);
    EXPECT_EQ(text_of(list.back()), "Done.");
    auto answered = tool_part(list, "call_w");
    ASSERT_TRUE(answered);
    EXPECT_EQ(string_at(json::value(*answered), "/state/output"), "waited twice") << str(*answered);
    EXPECT_EQ(model_.request_count(), 2u);
  }
  // Everything it waited for was deleted with the waits' ends: nothing goes on at the next start.
  json::array before = messages(sid);
  stop();
  EXPECT_FALSE(contains(server().log(), "go on")) << server().log();
  EXPECT_TRUE(status().empty()) << str(status());
  EXPECT_EQ(messages(sid), before);
}

// A resumed turn is a turn: an abort ends it, and the client that got the request again is told
// to give it up.
TEST_F(SessionDurableWait, AbortingAResumedTurnCancelsItsClientCall) {
  start_server(openai_config());
  std::string sid = create_session();
  {
    auto ws = connect_client(sid, {tool_def("wait")});
    model_.push(FakeResponse::with_tool_call("call_w", "client_c1_wait", json::object{}));
    prompt_async(sid, "wait for the client");
    next_ws_request(*ws);
    ASSERT_NO_FATAL_FAILURE(stop_cleanly());
  }
  server_.reset();
  start_server(openai_config());
  auto ws = std::make_unique<WsClient>(port(), "/client-tools/ws/c1");
  json::object req = next_ws_request(*ws);
  auto aborted = http_post(port(), "/session/" + sid + "/abort", json::object{});
  ASSERT_EQ(aborted.status, 200u) << aborted.describe();
  EXPECT_EQ(aborted.body, "true");
  auto cancel = ws->next_message_of_type("cancel", 5s);
  ASSERT_TRUE(cancel) << "the client was not told";
  EXPECT_EQ(value_at(*cancel, "/requestID"), req.at("requestID")) << str(*cancel);
  json::array list = wait_turn_end(sid);
  ASSERT_EQ(list.size(), 2u) << str(list);
  EXPECT_EQ(string_at(list[1], "/info/error/name"), "MessageAbortedError") << str(list[1]);
  auto part = tool_part(list, "call_w");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_EQ(model_.request_count(), 1u);
}

// A permission ask that waits for a person outlives a stop and a crash: after the restart it is
// listed again under the same id (with what it asked), the session awaits input, the person's
// answer to that id is taken, the command runs once (not before), and the turn goes on.
TEST_F(SessionDurableWait, AWaitingAskIsAskedAgainUnderItsIdAfterARestart) {
  json::object cfg = openai_config(json::object{{"permission", json::object{{"bash", "ask"}}}});
  start_server(cfg);
  std::string sid = create_session();
  std::string ask_id;
  {
    BusEvents bus(port());
    model_.push(FakeResponse::with_tool_call(
        "call_b", "bash",
        json::object{{"command", "echo ran >> ran.txt && echo approved"},
                     {"description", "echo"}}));
    model_.push(FakeResponse::with_text("Ran it after the restarts."));
    prompt_async(sid, "run it");
    auto asked = bus.next("permission.asked");
    ASSERT_TRUE(asked) << "no permission.asked event";
    ask_id = string_at(json::value(*asked), "/properties/id");
    // Through a stop, then through a crash (listed, so stored, before it).
    ASSERT_NO_FATAL_FAILURE(stop_cleanly());
  }
  server_.reset();
  start_server(cfg);
  ASSERT_TRUE(
      wait_until([&] { return !http_get(port(), "/permission").json().as_array().empty(); }, 5s));
  ASSERT_EQ(string_at(http_get(port(), "/permission").json(), "/0/id"), ask_id);
  server().send_signal(SIGKILL);
  ASSERT_TRUE(server().wait_exit(5s));
  server_.reset();
  start_server(cfg);
  ASSERT_TRUE(
      wait_until([&] { return !http_get(port(), "/permission").json().as_array().empty(); }, 5s))
      << "the ask is not listed after the restart";
  json::value listed = http_get(port(), "/permission").json();
  ASSERT_EQ(listed.as_array().size(), 1u) << str(listed);
  EXPECT_EQ(string_at(listed, "/0/id"), ask_id) << str(listed);
  EXPECT_EQ(string_at(listed, "/0/permission"), "bash") << str(listed);
  EXPECT_EQ(array_at(listed, "/0/patterns"), (json::array{"echo ran >> ran.txt", "echo approved"}))
      << str(listed);
  EXPECT_EQ(string_at(listed, "/0/tool/callID"), "call_b") << str(listed);
  EXPECT_EQ(string_at(json::value(status()), "/" + sid + "/type"), "awaiting-input")
      << str(status());
  EXPECT_FALSE(std::filesystem::exists(project_.path() / "ran.txt")) << "it ran before the answer";

  auto replied =
      http_post(port(), "/permission/" + ask_id + "/reply", json::object{{"reply", "once"}});
  ASSERT_TRUE(IsOk(replied)) << replied.describe();
  json::array list = wait_turn_end(sid);
  auto part = tool_part(list, "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  std::ifstream ran(project_.path() / "ran.txt");
  std::string ran_text((std::istreambuf_iterator<char>(ran)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ran_text, "ran\n") << "the command ran other than once";
  auto second = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(second);
  EXPECT_TRUE(contains(string_at(openai_tool_message(*second, "call_b"), "/content"), "approved"))
      << second->body;
  EXPECT_EQ(text_of(list.back()), "Ran it after the restarts.");
  EXPECT_EQ(http_get(port(), "/permission").json(), json::array{});
}

// A rejected ask after the restart ends the call as a rejection does, and stops the turn.
TEST_F(SessionDurableWait, AnAskRejectedAfterTheRestartStopsTheTurn) {
  json::object cfg = openai_config(json::object{{"permission", json::object{{"bash", "ask"}}}});
  start_server(cfg);
  std::string sid = create_session();
  std::string ask_id;
  {
    BusEvents bus(port());
    model_.push(FakeResponse::with_tool_call(
        "call_b", "bash", json::object{{"command", "touch nope"}, {"description", "touch"}}));
    prompt_async(sid, "run it");
    auto asked = bus.next("permission.asked");
    ASSERT_TRUE(asked);
    ask_id = string_at(json::value(*asked), "/properties/id");
    ASSERT_NO_FATAL_FAILURE(stop_cleanly());
  }
  server_.reset();
  start_server(cfg);
  ASSERT_TRUE(
      wait_until([&] { return !http_get(port(), "/permission").json().as_array().empty(); }, 5s));
  auto replied =
      http_post(port(), "/permission/" + ask_id + "/reply", json::object{{"reply", "reject"}});
  ASSERT_TRUE(IsOk(replied)) << replied.describe();
  json::array list = wait_turn_end(sid);
  ASSERT_EQ(list.size(), 2u) << str(list);
  EXPECT_EQ(string_at(list[1], "/info/error/name"), "PermissionRejectedError") << str(list[1]);
  auto part = tool_part(list, "call_b");
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
  EXPECT_FALSE(std::filesystem::exists(project_.path() / "nope"));
  EXPECT_EQ(model_.request_count(), 1u);
}

TEST_F(SessionRestart, SessionsPersistAcrossACleanRestart) {
  start_server(openai_config());
  std::string sid = create_session(json::object{{"title", "keep me"}});
  model_.push(FakeResponse::with_tool_call(
      "call_e", "bash", json::object{{"command", "echo kept"}, {"description", "echo"}}));
  model_.push(FakeResponse::with_text("stored answer"));
  ASSERT_TRUE(IsOk(prompt(sid, "remember this")));
  auto before = messages(sid);
  auto session_before = http_get(port(), "/session/" + sid).json();
  ASSERT_EQ(before.size(), 3u) << str(before);

  server().send_signal(SIGTERM);
  auto exited = server().wait_exit(10s);
  ASSERT_TRUE(exited && exited->exited && exited->code == 0);
  server_.reset();
  start_server(openai_config());

  EXPECT_EQ(http_get(port(), "/session/" + sid).json(), session_before);
  EXPECT_EQ(messages(sid), before);
  EXPECT_EQ(string_at(http_get(port(), "/session").json(), "/0/title"), "keep me");
  EXPECT_FALSE(contains(server().log(), "interrupted")) << server().log();

  // The model gets the same conversation from the restarted server (read back from the store)
  // as the first one sent from memory: what the last request had, then the answer and the new
  // prompt.
  model_.push(FakeResponse::with_text("still here"));
  ASSERT_TRUE(IsOk(prompt(sid, "and now?")));
  auto requests = model_.requests();
  ASSERT_EQ(requests.size(), 3u);
  const json::array& sent_before = array_at(requests[1].json, "/messages");
  const json::array& sent_after = array_at(requests[2].json, "/messages");
  ASSERT_EQ(sent_after.size(), sent_before.size() + 2) << requests[2].body;
  for (std::size_t i = 0; i < sent_before.size(); ++i)
    EXPECT_EQ(sent_after[i], sent_before[i]) << "message " << i << ": " << requests[2].body;
  EXPECT_EQ(string_at(json::value(sent_after[sent_before.size()]), "/content"), "stored answer");
  EXPECT_EQ(string_at(json::value(sent_after.back()), "/content"), "and now?");
}

// A build before typed rules accepted any JSON as a rule's pattern and stored it; the first
// prompt of such a session (or its tool list) killed the server, again after every restart.
// Such a session is still listed and shown, but refuses turns and tool lists with a 409 that
// says why, and the server lives on.
TEST_F(SessionRestart, AStoredSessionWhoseRulesDoNotDecodeIsRefusedNotACrash) {
  start_server(openai_config());
  std::string sid = create_session(json::object{{"title", "old rules"}});
  std::string other = create_session();
  server_.reset();
  if (test::storage_is_postgres()) {
    auto changed = test::postgres_query(
        test::postgres_store_url(data_.path().string()),
        "WITH changed AS (UPDATE session SET data = jsonb_set(data::jsonb, '{permission}', "
        "'[{\"permission\":\"bash\",\"pattern\":7,\"action\":\"deny\"}]'::jsonb)::text "
        "WHERE id = '" +
            sid + "' RETURNING id) SELECT count(*) FROM changed");
    EXPECT_EQ(changed, "1");
  } else {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((data_.path() / "switchboard.db").c_str(), &db), SQLITE_OK);
    std::string sql =
        "UPDATE session SET data = json_set(data, '$.permission', "
        "json('[{\"permission\":\"bash\",\"pattern\":7,\"action\":\"deny\"}]')) "
        "WHERE id = '" +
        sid + "'";
    char* error = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    std::string message = error ? error : "";
    sqlite3_free(error);
    EXPECT_EQ(sqlite3_changes(db), 1);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << message;
  }
  start_server(openai_config());
  auto shown = http_get(port(), "/session/" + sid);
  ASSERT_TRUE(IsOk(shown));
  EXPECT_EQ(shown.json().at("permission"),
            json::parse(R"([{"permission":"bash","pattern":7,"action":"deny"}])"))
      << "shown as stored";
  const char* why = "permission[0].pattern must be a string, got number";
  EXPECT_TRUE(IsError(prompt(sid, "hi"), 409, "CONFLICT", {sid, why}));
  EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + "/prompt_async", text_prompt("hi")),
                      409, "CONFLICT", {why}))
      << "refused before the turn starts, not in the background";
  EXPECT_TRUE(IsError(http_get(port(), "/tool?sessionID=" + sid), 409, "CONFLICT", {why}));
  EXPECT_TRUE(contains(server().log(), sid)) << "a warning names the session: " << server().log();
  EXPECT_EQ(model_.request_count(), 0u);
  EXPECT_EQ(messages(sid), json::array{});
  // The server is alive and the other sessions work; the bad one can be deleted.
  model_.push(FakeResponse::with_text("fine"));
  EXPECT_TRUE(IsOk(prompt(other, "hi")));
  EXPECT_TRUE(IsOk(http_request(port(), "DELETE", "/session/" + sid)));
  EXPECT_EQ(http_get(port(), "/session").json().as_array().size(), 1u);
}

// ---- the session routes -------------------------------------------------------------------------

class SessionApi : public SessionTest {};

TEST_F(SessionApi, CreateListGetDelete) {
  start_server(openai_config());
  BusEvents bus(port());
  auto created = http_post(port(), "/session", json::object{{"title", "first"}});
  ASSERT_TRUE(IsOk(created));
  json::value s = created.json();
  std::string sid = string_at(s, "/id");
  EXPECT_EQ(sid.rfind("ses_", 0), 0u) << created.describe();
  EXPECT_EQ(string_at(s, "/title"), "first");
  EXPECT_EQ(string_at(s, "/directory"), project_.path().string());
  ASSERT_TRUE(bus.next_where("session.created", "/properties/info/id", json::value(sid)));

  auto untitled = http_request(port(), "POST", "/session");
  ASSERT_TRUE(IsOk(untitled)) << "a POST /session without a body creates a session";
  EXPECT_FALSE(string_at(untitled.json(), "/title").empty());

  auto list = http_get(port(), "/session");
  ASSERT_TRUE(IsOk(list));
  EXPECT_EQ(list.json().as_array().size(), 2u);
  EXPECT_EQ(http_get(port(), "/session/" + sid).json(), s);

  model_.push(FakeResponse::with_text("bye"));
  ASSERT_TRUE(IsOk(prompt(sid, "hello")));
  auto deleted = http_request(port(), "DELETE", "/session/" + sid);
  ASSERT_TRUE(IsOk(deleted));
  EXPECT_EQ(deleted.json(), json::value(true));
  ASSERT_TRUE(bus.next_where("session.deleted", "/properties/info/id", json::value(sid)));
  EXPECT_TRUE(IsError(http_get(port(), "/session/" + sid), 404, "NOT_FOUND", {sid}));
  EXPECT_TRUE(IsError(http_get(port(), "/session/" + sid + "/message"), 404, "NOT_FOUND"));
  EXPECT_TRUE(IsError(http_request(port(), "DELETE", "/session/" + sid), 404, "NOT_FOUND"));
  EXPECT_EQ(http_get(port(), "/session").json().as_array().size(), 1u);
}

TEST_F(SessionApi, DeletingABusySessionAbortsItsTurn) {
  start_server(openai_config());
  std::string sid = create_session();
  BusEvents bus(port());
  FakeResponse slow = FakeResponse::with_text("too late");
  slow.delay = 20s;
  model_.push(slow);
  prompt_async(sid, "wait");
  ASSERT_TRUE(model_.wait_for_request(0, 5s));
  auto t0 = Clock::now();
  ASSERT_TRUE(IsOk(http_request(port(), "DELETE", "/session/" + sid)));
  wait_idle(bus, sid, 5s);
  EXPECT_LT(elapsed_ms(t0), 3000);
  EXPECT_TRUE(status().empty());
  EXPECT_TRUE(IsError(http_get(port(), "/session/" + sid), 404, "NOT_FOUND"));
}

TEST_F(SessionApi, ToolListHasSchemasAndFollowsTheAgent) {
  start_server(openai_config());
  auto res = http_get(port(), "/tool");
  ASSERT_TRUE(IsOk(res));
  std::set<std::string> build;
  json::value tools = res.json();
  for (const auto& t : tools.as_array()) {
    std::string id = string_at(t, "/id");
    build.insert(id);
    EXPECT_FALSE(string_at(t, "/description").empty()) << str(t);
    EXPECT_EQ(string_at(t, "/parameters/type"), "object") << str(t);
  }
  for (auto id : {"bash", "read", "list", "glob", "grep", "edit", "write", "todowrite", "todoread"})
    EXPECT_TRUE(build.count(id)) << id << " is missing from " << res.describe();

  auto plan = http_get(port(), "/tool?agent=plan");
  ASSERT_TRUE(IsOk(plan));
  std::set<std::string> planned;
  json::value plan_tools = plan.json();
  for (const auto& t : plan_tools.as_array())
    planned.insert(string_at(t, "/id"));
  for (auto id : {"edit", "write", "bash"})
    EXPECT_FALSE(planned.count(id)) << "the plan agent is offered " << id;
  for (auto id : {"read", "grep", "glob", "list"})
    EXPECT_TRUE(planned.count(id)) << "the plan agent lacks " << id;

  EXPECT_TRUE(IsError(http_get(port(), "/tool?agent=nobody"), 404, "NOT_FOUND", {"nobody"}));
  EXPECT_TRUE(IsError(http_get(port(), "/tool?sessionID=ses_nope"), 404, "NOT_FOUND"));
}

TEST_F(SessionApi, ToolListIsWhatTheModelIsOffered) {
  start_server(openai_config());
  std::string sid = create_session();
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(
      json::object{{"type", "register"}, {"sessionID", sid}, {"tools", {tool_def("pick")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));

  for (auto agent : {"build", "plan"}) {
    auto listed = http_get(port(), "/tool?sessionID=" + sid + "&agent=" + agent);
    ASSERT_TRUE(IsOk(listed));
    std::vector<std::string> ids;
    json::value listed_tools = listed.json();
    for (const auto& t : listed_tools.as_array())
      ids.push_back(string_at(t, "/id"));
    EXPECT_TRUE(std::count(ids.begin(), ids.end(), "client_c1_pick")) << listed.describe();

    std::size_t before = model_.request_count();
    model_.push(FakeResponse::with_text("ok"));
    json::object body = text_prompt("hello");
    body["agent"] = agent;
    ASSERT_TRUE(IsOk(http_post(port(), "/session/" + sid + "/message", body)));
    auto req = model_.wait_for_request(before, 1s);
    ASSERT_TRUE(req);
    EXPECT_EQ(openai_tool_names(*req), ids) << agent;
  }
  // Without the session, its client tool is not listed.
  auto global = http_get(port(), "/tool").body;
  EXPECT_FALSE(contains(global, "client_c1_pick")) << global;
}

TEST_F(SessionApi, PerPromptToolSwitchesHideTools) {
  start_server(openai_config());
  std::string sid = create_session();
  model_.push(FakeResponse::with_text("ok"));
  json::object body = text_prompt("hello");
  body["tools"] = json::object{{"bash", false}, {"write", false}};
  ASSERT_TRUE(IsOk(http_post(port(), "/session/" + sid + "/message", body)));
  auto req = model_.wait_for_request(0, 1s);
  ASSERT_TRUE(req);
  auto names = openai_tool_names(*req);
  EXPECT_EQ(std::count(names.begin(), names.end(), "bash"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "write"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "read"), 1);
}

TEST_F(SessionApi, ProvidersAreListed) {
  start_server(openai_config());
  // OpenCode's shape: {all: [Provider], default: {providerID: modelID}, connected}.
  auto res = http_get(port(), "/provider");
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/default/fake"), "fake-model");
  bool found = false;
  json::value body = res.json();
  for (const auto& p : array_at(body, "/all"))
    if (string_at(p, "/id") == "fake") {
      found = true;
      EXPECT_EQ(string_at(p, "/models/fake-model/api/npm"), "@ai-sdk/openai-compatible");
      EXPECT_EQ(string_at(p, "/models/fake-model/providerID"), "fake");
    }
  EXPECT_TRUE(found) << res.describe();
  EXPECT_EQ(string_at(http_get(port(), "/config").json(), "/model"), "fake/fake-model");
}

TEST_F(SessionApi, MalformedBodiesAre400NamingTheField) {
  start_server(openai_config());
  std::string sid = create_session();
  auto post_raw = [&](const std::string& target, std::string_view body) {
    return http_request(port(), "POST", target, body);
  };
  EXPECT_TRUE(IsError(post_raw("/session", "{not json"), 400, "INVALID_REQUEST"));
  EXPECT_TRUE(IsError(post_raw("/session", "[1, 2]"), 400, "INVALID_REQUEST", {"object"}));
  EXPECT_TRUE(IsError(http_post(port(), "/session", json::object{{"title", 5}}), 400,
                      "INVALID_REQUEST", {"title"}));
  EXPECT_TRUE(IsError(http_post(port(), "/session", json::object{{"permission", "allow"}}), 400,
                      "INVALID_REQUEST", {"permission"}));
  EXPECT_TRUE(IsError(
      http_post(port(), "/session",
                json::object{{"permission", json::array{json::object{{"permission", "bash"},
                                                                     {"action", "maybe"}}}}}),
      400, "INVALID_REQUEST", {"permission[0]"}));
  // A parent that does not exist is refused (it was stored as the child of nothing).
  EXPECT_TRUE(IsError(http_post(port(), "/session", json::object{{"parentID", "ses_nope"}}), 400,
                      "INVALID_REQUEST", {"parentID", "ses_nope"}));
  auto child = http_post(port(), "/session", json::object{{"parentID", sid}});
  ASSERT_TRUE(IsOk(child));
  EXPECT_EQ(string_at(child.json(), "/parentID"), sid);

  for (std::string route : {"/message", "/prompt_async"}) {
    std::string target = "/session/" + sid + route;
    SCOPED_TRACE(target);
    EXPECT_TRUE(IsError(post_raw(target, "{\"parts\": ["), 400, "INVALID_REQUEST"));
    EXPECT_TRUE(IsError(post_raw(target, ""), 400, "INVALID_REQUEST"));
    EXPECT_TRUE(
        IsError(http_post(port(), target, json::object{}), 400, "INVALID_REQUEST", {"parts"}));
    EXPECT_TRUE(IsError(http_post(port(), target, json::object{{"parts", "hello"}}), 400,
                        "INVALID_REQUEST", {"parts"}));
    EXPECT_TRUE(IsError(http_post(port(), target, json::object{{"parts", json::array{}}}), 400,
                        "INVALID_REQUEST", {"parts"}));
    EXPECT_TRUE(IsError(http_post(port(), target, json::object{{"parts", json::array{"hi"}}}), 400,
                        "INVALID_REQUEST", {"parts[0]"}));
    EXPECT_TRUE(
        IsError(http_post(port(), target,
                          json::object{{"parts", json::array{json::object{{"type", "image"}}}}}),
                400, "INVALID_REQUEST", {"parts[0].type"}));
    EXPECT_TRUE(
        IsError(http_post(port(), target,
                          json::object{{"parts", json::array{json::object{{"type", "text"}}}}}),
                400, "INVALID_REQUEST", {"parts[0].text"}));
    EXPECT_TRUE(IsError(
        http_post(
            port(), target,
            json::object{{"parts", json::array{json::object{{"type", "text"}, {"text", 5}}}}}),
        400, "INVALID_REQUEST", {"parts[0].text"}));
    json::object body = text_prompt("hi");
    body["model"] = 5;
    EXPECT_TRUE(IsError(http_post(port(), target, body), 400, "INVALID_REQUEST", {"model"}));
    body = text_prompt("hi");
    body["model"] = json::object{{"providerID", "fake"}};
    EXPECT_TRUE(IsError(http_post(port(), target, body), 400, "INVALID_REQUEST", {"modelID"}));
    body = text_prompt("hi");
    body["agent"] = json::array{};
    EXPECT_TRUE(IsError(http_post(port(), target, body), 400, "INVALID_REQUEST", {"agent"}));
    body = text_prompt("hi");
    body["tools"] = json::object{{"bash", "no"}};
    EXPECT_TRUE(IsError(http_post(port(), target, body), 400, "INVALID_REQUEST", {"tools.bash"}));
    body = text_prompt("hi");
    body["tools"] = json::array{"bash"};
    EXPECT_TRUE(IsError(http_post(port(), target, body), 400, "INVALID_REQUEST", {"tools"}));
  }
  // Nothing above started a turn.
  EXPECT_EQ(model_.request_count(), 0u);
  EXPECT_EQ(messages(sid), json::array{});

  EXPECT_TRUE(IsError(http_post(port(), "/permission/per_x/reply", json::object{}), 400,
                      "INVALID_REQUEST", {"reply"}));
  EXPECT_TRUE(
      IsError(http_post(port(), "/permission/per_x/reply", json::object{{"reply", "sometimes"}}),
              400, "INVALID_REQUEST", {"reply"}));
  EXPECT_TRUE(IsError(http_post(port(), "/permission/per_x/reply", json::object{{"reply", "once"}}),
                      404, "NOT_FOUND"));
}

// The sequence that killed the server: a rule with a number as its pattern was stored, and the
// session's first prompt or tool list dereferenced it as a string.
TEST_F(SessionApi, ARuleOfTheWrongTypeIs400NamingItAndRulesAreKeptTyped) {
  start_server(openai_config());
  auto rule = [](json::value permission, json::value pattern, json::value action) {
    return json::object{
        {"permission", json::array{json::object{
                           {"permission", permission}, {"pattern", pattern}, {"action", action}}}}};
  };
  EXPECT_TRUE(IsError(http_post(port(), "/session", rule("bash", 7, "deny")), 400,
                      "INVALID_REQUEST", {"permission[0].pattern must be a string, got number"}));
  EXPECT_TRUE(IsError(http_post(port(), "/session", rule(json::array{}, "*", "deny")), 400,
                      "INVALID_REQUEST", {"permission[0].permission must be a string"}));
  EXPECT_TRUE(IsError(http_post(port(), "/session", rule("bash", "*", nullptr)), 400,
                      "INVALID_REQUEST", {"permission[0].action"}));
  EXPECT_EQ(http_get(port(), "/session").json(), json::array{}) << "nothing was stored";

  // Good rules work end to end: shown in OpenCode's shape, applied to the tool list and a turn.
  auto created = http_post(port(), "/session", rule("bash", "*", "deny"));
  ASSERT_TRUE(IsOk(created));
  std::string sid = string_at(created.json(), "/id");
  EXPECT_EQ(created.json().at("permission"),
            json::parse(R"([{"permission":"bash","pattern":"*","action":"deny"}])"));
  auto tools = http_get(port(), "/tool?sessionID=" + sid);
  ASSERT_TRUE(IsOk(tools));
  json::value offered = tools.json();
  for (const auto& t : offered.as_array())
    EXPECT_NE(string_at(t, "/id"), "bash") << "the session denies bash";
  model_.push(FakeResponse::with_text("no bash here"));
  auto answer = prompt(sid, "hi");
  ASSERT_TRUE(IsOk(answer));
  ASSERT_EQ(model_.request_count(), 1u);
  auto requests = model_.requests();
  for (const auto& name : openai_tool_names(requests[0]))
    EXPECT_NE(name, "bash");
}

TEST_F(SessionApi, UnknownAgentOrModelIsRefusedBeforeTheTurnStarts) {
  start_server(openai_config());
  std::string sid = create_session();
  for (std::string route : {"/message", "/prompt_async"}) {
    SCOPED_TRACE(route);
    json::object body = text_prompt("hi");
    body["agent"] = "nobody";
    EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + route, body), 400, "INVALID_REQUEST",
                        {"nobody"}));
    body = text_prompt("hi");
    body["model"] = "nowhere/model";
    EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + route, body), 400, "INVALID_REQUEST",
                        {"nowhere"}));
  }
  EXPECT_TRUE(wait_until([&] { return status().empty(); }, 2s));
  EXPECT_EQ(model_.request_count(), 0u);
}

TEST_F(SessionApi, UnknownSessionIs404) {
  start_server(openai_config());
  const std::string s = "/session/ses_doesnotexist";
  EXPECT_TRUE(IsError(http_get(port(), s), 404, "NOT_FOUND", {"ses_doesnotexist"}));
  EXPECT_TRUE(IsError(http_request(port(), "DELETE", s), 404, "NOT_FOUND"));
  EXPECT_TRUE(IsError(http_get(port(), s + "/message"), 404, "NOT_FOUND"));
  EXPECT_TRUE(IsError(http_post(port(), s + "/message", text_prompt("hi")), 404, "NOT_FOUND"));
  EXPECT_TRUE(IsError(http_post(port(), s + "/prompt_async", text_prompt("hi")), 404, "NOT_FOUND"));
  EXPECT_TRUE(IsError(http_post(port(), s + "/abort", json::object{}), 404, "NOT_FOUND"));
  EXPECT_EQ(model_.request_count(), 0u);
}

// The task and question tools, driven by the scripted model's "/call TOOL {json}".
class SessionScripted : public SessionTest {
 protected:
  void SetUp() override { start_server(test_config()); }  // nothing configured: scripted model
};

TEST_F(SessionScripted, TaskRunsASubSessionWithTheAgentAndReturnsItsAnswer) {
  std::string sid = create_session();
  auto res = prompt(sid,
                    "/call task {\"description\": \"look around\", \"prompt\": \"list the "
                    "files\", \"subagent_type\": \"plan\"}");
  ASSERT_EQ(res.status, 200) << res.describe();
  // The parent's tool part holds the sub-agent's final answer and the sub-session's id.
  json::array msgs = messages(sid);
  std::optional<json::object> part;
  for (const auto& p : parts_of(msgs))
    if (p.contains("tool") && p.at("tool") == "task") part = p;
  ASSERT_TRUE(part) << json::serialize(msgs);
  json::value pv(*part);
  EXPECT_EQ(string_at(pv, "/state/status"), "completed") << str(*part);
  std::string output = string_at(pv, "/state/output");
  EXPECT_TRUE(contains(output, "Echo: list the files")) << output;
  std::string child = string_at(pv, "/state/metadata/sessionId");
  ASSERT_FALSE(child.empty()) << str(*part);
  EXPECT_TRUE(contains(output, child)) << output;

  auto sub = http_get(port(), "/session/" + child);
  ASSERT_EQ(sub.status, 200) << sub.describe();
  EXPECT_EQ(string_at(sub.json(), "/parentID"), sid);
  // The sub-session ran with the plan agent and was not offered task itself.
  json::array sub_msgs = messages(child);
  ASSERT_GE(sub_msgs.size(), 2u);
  EXPECT_EQ(string_at(sub_msgs[0], "/info/agent"), "plan");
}

// A sub-agent that a person stopped (its permission ask unanswered) is an answer for the parent,
// not a failure: the task part completes with why the sub-agent stopped.
TEST_F(SessionTest, ASubAgentStoppedByARejectedAskTellsTheParentWhy) {
  json::object cfg = test_config();
  cfg["permission"] = json::object{{"bash", "ask"}, {"timeout", 300}};
  start_server(cfg);
  std::string sid = create_session();
  json::object bash_args{{"command", "echo hi"}, {"description", "say hi"}};
  json::object task_args{{"description", "say hi"},
                         {"prompt", "/call bash " + json::serialize(bash_args)},
                         {"subagent_type", "build"}};
  auto res = prompt(sid, "/call task " + json::serialize(task_args));
  ASSERT_EQ(res.status, 200) << res.describe();
  std::optional<json::object> part;
  for (const auto& p : parts_of(messages(sid)))
    if (p.contains("tool") && p.at("tool") == "task") part = p;
  ASSERT_TRUE(part) << json::serialize(messages(sid));
  json::value pv(*part);
  EXPECT_EQ(string_at(pv, "/state/status"), "completed") << str(*part);
  EXPECT_TRUE(contains(string_at(pv, "/state/output"),
                       "The sub-agent stopped: Permission to use bash for `echo hi` was rejected: "
                       "nobody answered within 300 ms."))
      << str(*part);
}

// A config whose only provider is scripted answers with it (not the built-in echo), and the log
// does not claim that no provider is configured.
TEST_F(SessionTest, AConfiguredScriptedProviderAloneIsTheDefault) {
  json::object cfg = test_config();
  cfg["provider"] = json::object{
      {"demo", json::object{{"type", "scripted"},
                            {"script", json::array{json::object{{"text", "from the script"}}}}}}};
  start_server(cfg);
  EXPECT_FALSE(contains(server().log(), "no model provider is configured")) << server().log();
  EXPECT_TRUE(contains(server().log(), "default model: demo/default")) << server().log();
  auto res = prompt(create_session(), "hi");
  ASSERT_EQ(res.status, 200) << res.describe();
  EXPECT_EQ(text_of(res.json()), "from the script") << res.describe();
}

TEST_F(SessionScripted, QuestionWaitsForTheAnswerWithStatusAwaitingInput) {
  BusEvents bus(port());
  std::string sid = create_session();
  prompt_async(sid,
               "/call question {\"questions\": [{\"question\": \"Which color?\", \"options\": "
               "[{\"label\": \"red\"}, {\"label\": \"blue\"}]}]}");
  ASSERT_TRUE(wait_until(
      [&] {
        auto s = status();
        return s.contains(sid) && s.at(sid).at("type") == "awaiting-input";
      },
      5s))
      << json::serialize(status());
  auto list = http_get(port(), "/question");
  ASSERT_EQ(list.status, 200) << list.describe();
  ASSERT_EQ(list.json().as_array().size(), 1u) << list.describe();
  std::string qid = string_at(list.json().as_array()[0], "/id");
  EXPECT_EQ(string_at(list.json().as_array()[0], "/sessionID"), sid);

  // Answers that do not fit the questions are refused and the question stays open.
  auto bad =
      http_post(port(), "/question/" + qid + "/reply", json::object{{"answers", json::array{}}});
  EXPECT_EQ(bad.status, 400) << bad.describe();
  auto good = http_post(port(), "/question/" + qid + "/reply",
                        json::object{{"answers", json::array{json::array{"blue"}}}});
  ASSERT_EQ(good.status, 200) << good.describe();
  wait_idle(bus, sid);
  auto again = http_post(port(), "/question/" + qid + "/reply",
                         json::object{{"answers", json::array{json::array{"red"}}}});
  EXPECT_EQ(again.status, 404) << again.describe();

  json::array msgs = messages(sid);
  std::optional<json::object> part;
  for (const auto& p : parts_of(msgs))
    if (p.contains("tool") && p.at("tool") == "question") part = p;
  ASSERT_TRUE(part) << json::serialize(msgs);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed");
  EXPECT_TRUE(
      contains(string_at(json::value(*part), "/state/output"), "\"Which color?\" = \"blue\""))
      << str(*part);
}

// A question that waits for its answer outlives a stop: after the restart it is listed again
// under its id, the answer to that id is taken, and the tool's result carries it.
TEST_F(SessionScripted, AWaitingQuestionIsAskedAgainUnderItsIdAfterARestart) {
  std::string sid = create_session();
  prompt_async(sid,
               "/call question {\"questions\": [{\"question\": \"Which color?\", \"options\": "
               "[{\"label\": \"red\"}, {\"label\": \"blue\"}]}]}");
  ASSERT_TRUE(
      wait_until([&] { return !http_get(port(), "/question").json().as_array().empty(); }, 5s));
  std::string qid = string_at(http_get(port(), "/question").json(), "/0/id");
  server().send_signal(SIGTERM);
  auto exited = server().wait_exit(10s);
  ASSERT_TRUE(exited && exited->exited && exited->code == 0);
  server_.reset();
  start_server(test_config());

  ASSERT_TRUE(
      wait_until([&] { return !http_get(port(), "/question").json().as_array().empty(); }, 5s))
      << "the question is not listed after the restart";
  json::value listed = http_get(port(), "/question").json();
  ASSERT_EQ(listed.as_array().size(), 1u) << str(listed);
  EXPECT_EQ(string_at(listed, "/0/id"), qid) << str(listed);
  EXPECT_EQ(string_at(listed, "/0/questions/0/question"), "Which color?") << str(listed);
  EXPECT_EQ(string_at(json::value(status()), "/" + sid + "/type"), "awaiting-input");
  auto good = http_post(port(), "/question/" + qid + "/reply",
                        json::object{{"answers", json::array{json::array{"blue"}}}});
  ASSERT_EQ(good.status, 200) << good.describe();
  ASSERT_TRUE(wait_until([&] { return status().empty(); }, 10s)) << str(status());
  json::array msgs = messages(sid);
  std::optional<json::object> part;
  for (const auto& p : parts_of(msgs))
    if (p.contains("tool") && p.at("tool") == "question") part = p;
  ASSERT_TRUE(part) << json::serialize(msgs);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "completed") << str(*part);
  EXPECT_TRUE(
      contains(string_at(json::value(*part), "/state/output"), "\"Which color?\" = \"blue\""))
      << str(*part);
  EXPECT_EQ(find(msgs.back(), "/info/error"), nullptr) << str(msgs.back());
}

TEST_F(SessionScripted, AbortClosesAnOpenQuestion) {
  BusEvents bus(port());
  std::string sid = create_session();
  prompt_async(sid,
               "/call question {\"questions\": [{\"question\": \"Go on?\", \"options\": "
               "[{\"label\": \"yes\"}]}]}");
  ASSERT_TRUE(
      wait_until([&] { return http_get(port(), "/question").json().as_array().size() == 1; }, 5s));
  auto abort = http_post(port(), "/session/" + sid + "/abort", json::object{});
  ASSERT_EQ(abort.status, 200) << abort.describe();
  wait_idle(bus, sid);
  EXPECT_TRUE(http_get(port(), "/question").json().as_array().empty());
  std::optional<json::object> part;
  for (const auto& p : parts_of(messages(sid)))
    if (p.contains("tool") && p.at("tool") == "question") part = p;
  ASSERT_TRUE(part);
  EXPECT_EQ(string_at(json::value(*part), "/state/status"), "error") << str(*part);
}

// ---- summarize (OpenCode's compaction) and init -------------------------------------------------

TEST_F(SessionTest, ASummaryReplacesTheConversationTheModelSeesAndSurvivesARestart) {
  start_server(openai_config());
  BusEvents bus(port());
  std::string sid = create_session();
  model_.push(FakeResponse::with_text("first answer"));
  ASSERT_TRUE(IsOk(prompt(sid, "first question")));

  model_.push(FakeResponse::with_text("SUMMARY: one question was asked"));
  auto summarized = http_post(port(), "/session/" + sid + "/summarize",
                              json::object{{"providerID", "fake"}, {"modelID", "fake-model"}});
  ASSERT_TRUE(IsOk(summarized)) << summarized.describe();
  EXPECT_EQ(summarized.json(), json::value(true)) << summarized.describe();
  EXPECT_TRUE(bus.next_where("session.compacted", "/properties/sessionID", json::value(sid), 5s))
      << "no session.compacted event";

  // The model was asked for the summary with the whole conversation and no tools.
  auto asked = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(asked);
  auto asked_users = user_texts(*asked);
  ASSERT_EQ(asked_users.size(), 2u) << asked->body;
  EXPECT_EQ(asked_users[0], "first question");
  EXPECT_TRUE(contains(asked_users[1], "Summarize our conversation")) << asked->body;
  EXPECT_EQ(find(asked->json, "/tools"), nullptr) << "tools offered for a summary: " << asked->body;

  // Stored as OpenCode stores a compaction: a user message with a compaction part, answered by
  // an assistant message with summary: true.
  json::array list = messages(sid);
  ASSERT_EQ(list.size(), 4u) << str(json::value(list));
  EXPECT_EQ(string_at(list[2], "/info/role"), "user");
  EXPECT_EQ(string_at(list[2], "/parts/0/type"), "compaction") << str(list[2]);
  EXPECT_EQ(value_at(list[2], "/parts/0/auto"), json::value(false)) << str(list[2]);
  EXPECT_EQ(string_at(list[3], "/info/role"), "assistant");
  EXPECT_EQ(value_at(list[3], "/info/summary"), json::value(true)) << str(list[3]);
  EXPECT_EQ(string_at(list[3], "/info/agent"), "compaction") << str(list[3]);
  EXPECT_EQ(string_at(list[3], "/info/parentID"), string_at(list[2], "/info/id"));
  EXPECT_EQ(text_of(list[3]), "SUMMARY: one question was asked");

  // The next turn's model sees the summary in place of what it summarizes.
  model_.push(FakeResponse::with_text("second answer"));
  ASSERT_TRUE(IsOk(prompt(sid, "second question")));
  auto next = model_.wait_for_request(2, 1s);
  ASSERT_TRUE(next);
  EXPECT_EQ(user_texts(*next),
            (std::vector<std::string>{"What did we do so far?", "second question"}))
      << next->body;
  EXPECT_TRUE(contains(next->body, "SUMMARY: one question was asked")) << next->body;
  EXPECT_FALSE(contains(next->body, "first answer")) << next->body;

  // Read back from the store after a restart, the conversation still starts at the summary.
  server_.reset();
  start_server(openai_config());
  model_.push(FakeResponse::with_text("third answer"));
  ASSERT_TRUE(IsOk(prompt(sid, "third question")));
  auto after_restart = model_.wait_for_request(3, 1s);
  ASSERT_TRUE(after_restart);
  EXPECT_EQ(
      user_texts(*after_restart),
      (std::vector<std::string>{"What did we do so far?", "second question", "third question"}))
      << after_restart->body;
  EXPECT_FALSE(contains(after_restart->body, "first question")) << after_restart->body;
}

TEST_F(SessionTest, ASummaryTheModelFailsIsFalseAndTheConversationStaysWhole) {
  start_server(openai_config());
  std::string sid = create_session();
  model_.push(FakeResponse::with_text("first answer"));
  ASSERT_TRUE(IsOk(prompt(sid, "first question")));
  model_.push(FakeResponse::http_error(400, "context too long"));
  auto summarized = http_post(port(), "/session/" + sid + "/summarize", json::object{});
  ASSERT_TRUE(IsOk(summarized)) << summarized.describe();
  EXPECT_EQ(summarized.json(), json::value(false)) << summarized.describe();
  json::array list = messages(sid);
  ASSERT_EQ(list.size(), 4u) << str(json::value(list));
  EXPECT_NE(find(list[3], "/info/error"), nullptr) << str(list[3]);
  // A summary that says nothing fails too: it would replace the conversation with nothing.
  model_.push(FakeResponse::with_text(""));
  summarized = http_post(port(), "/session/" + sid + "/summarize", json::object{});
  ASSERT_TRUE(IsOk(summarized)) << summarized.describe();
  EXPECT_EQ(summarized.json(), json::value(false)) << summarized.describe();
  list = messages(sid);
  ASSERT_EQ(list.size(), 6u) << str(json::value(list));
  EXPECT_EQ(string_at(list[5], "/info/error/name"), "SummaryError") << str(list[5]);

  model_.push(FakeResponse::with_text("second answer"));
  ASSERT_TRUE(IsOk(prompt(sid, "second question")));
  auto next = model_.wait_for_request(3, 1s);
  ASSERT_TRUE(next);
  EXPECT_EQ(user_texts(*next).front(), "first question")
      << "a failed summary cut the conversation: " << next->body;
}

TEST_F(SessionTest, SummarizeRefusesWhatItCannotDo) {
  start_server(openai_config());
  std::string sid = create_session();
  EXPECT_TRUE(IsError(
      http_post(port(), "/session/" + sid + "/summarize", json::object{{"providerID", "fake"}}),
      400, "INVALID_REQUEST"));
  EXPECT_TRUE(
      IsError(http_post(port(), "/session/" + sid + "/summarize", json::object{{"auto", "yes"}}),
              400, "INVALID_REQUEST"));
  EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + "/summarize",
                                json::object{{"providerID", "nope"}, {"modelID", "x"}}),
                      400, "INVALID_REQUEST"));
  EXPECT_TRUE(IsError(http_post(port(), "/session/ses_missing/summarize", json::object{}), 404,
                      "NOT_FOUND"));
  // While a turn runs: 409, and the turn is not harmed.
  FakeResponse slow = FakeResponse::with_text("slow answer");
  slow.delay = 500ms;
  model_.push(slow);
  prompt_async(sid, "take your time");
  EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + "/summarize", json::object{}), 409,
                      "CONFLICT"));
  // Busy wins over what the request names, as for a prompt.
  EXPECT_TRUE(IsError(http_post(port(), "/session/" + sid + "/summarize",
                                json::object{{"providerID", "nope"}, {"modelID", "x"}}),
                      409, "CONFLICT"));
  BusEvents bus(port());
  wait_idle(bus, sid);
  EXPECT_EQ(text_of(messages(sid).back()), "slow answer");
  EXPECT_EQ(model_.request_count(), 1u) << "a refused summary called the model";
}

TEST_F(SessionTest, AnAutomaticSummaryGoesOnWithTheWork) {
  start_server(openai_config());
  std::string sid = create_session();
  model_.push(FakeResponse::with_text("first answer"));
  // The session works with the plan agent: the summary and the turn after it keep to it.
  ASSERT_TRUE(IsOk(http_post(
      port(), "/session/" + sid + "/message",
      json::object{
          {"agent", "plan"},
          {"parts", json::array{json::object{{"type", "text"}, {"text", "first question"}}}}})));
  model_.push(FakeResponse::with_text("the summary"));
  model_.push(FakeResponse::with_text("going on"));
  auto summarized =
      http_post(port(), "/session/" + sid + "/summarize", json::object{{"auto", true}});
  ASSERT_TRUE(IsOk(summarized)) << summarized.describe();
  EXPECT_EQ(summarized.json(), json::value(true));
  json::array list = messages(sid);
  ASSERT_EQ(list.size(), 6u) << str(json::value(list));
  EXPECT_EQ(value_at(list[2], "/parts/0/auto"), json::value(true)) << str(list[2]);
  EXPECT_EQ(value_at(list[4], "/parts/0/synthetic"), json::value(true)) << str(list[4]);
  EXPECT_EQ(text_of(list[5]), "going on");
  EXPECT_EQ(string_at(list[2], "/info/agent"), "plan") << str(list[2]);
  EXPECT_EQ(string_at(list[4], "/info/agent"), "plan") << str(list[4]);
  EXPECT_EQ(string_at(list[5], "/info/agent"), "plan") << str(list[5]);
  auto go_on = model_.wait_for_request(2, 1s);
  ASSERT_TRUE(go_on);
  auto users = user_texts(*go_on);
  ASSERT_EQ(users.size(), 2u) << go_on->body;
  EXPECT_EQ(users[0], "What did we do so far?");
  EXPECT_TRUE(contains(go_on->body, "the summary")) << go_on->body;
}

TEST_F(SessionTest, InitRunsTheBuiltInCommandUnlessTheConfigHasItsOwn) {
  start_server(openai_config());
  auto listed = http_get(port(), "/command");
  ASSERT_TRUE(IsOk(listed));
  bool has_init = false;
  json::value commands = listed.json();
  for (const auto& c : commands.as_array())
    if (string_at(c, "/name") == "init") has_init = true;
  EXPECT_TRUE(has_init) << listed.describe();

  std::string sid = create_session();
  model_.push(FakeResponse::with_text("AGENTS.md written"));
  auto init = http_post(
      port(), "/session/" + sid + "/init",
      json::object{
          {"providerID", "fake"}, {"modelID", "fake-model"}, {"messageID", "msg_fromtheclient"}});
  ASSERT_TRUE(IsOk(init)) << init.describe();
  EXPECT_EQ(init.json(), json::value(true));
  auto asked = model_.wait_for_request(0, 1s);
  ASSERT_TRUE(asked);
  EXPECT_TRUE(contains(user_texts(*asked).back(), "AGENTS.md")) << asked->body;
  EXPECT_TRUE(IsError(
      http_post(port(), "/session/" + sid + "/init", json::object{{"messageID", "not-an-id"}}), 400,
      "INVALID_REQUEST"));

  server_.reset();
  start_server(openai_config(json::object{
      {"command",
       json::object{{"init", json::object{{"template", "Our own init: $ARGUMENTS"}}}}}}));
  model_.push(FakeResponse::with_text("done our way"));
  ASSERT_TRUE(IsOk(http_post(port(), "/session/" + sid + "/init", json::object{})));
  auto own = model_.wait_for_request(1, 1s);
  ASSERT_TRUE(own);
  EXPECT_EQ(user_texts(*own).back(), "Our own init: ") << own->body;
}

}  // namespace
}  // namespace sb::test
