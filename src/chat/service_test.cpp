// Chats in-process, as the server runs them: the scripted model, an in-memory store, the real
// session service, client-tool registry and permission service on one io_context. Each test
// asserts what an app sees: the chunks of each response, in order, and what the session stored.
#include "chat/service.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <functional>

#include "tool/builtin/bash.hpp"
#include "tool/builtin/invalid.hpp"
#include "util/ids.hpp"
#include "util/run_to_end.hpp"

namespace sb::chat {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The chunks of one response as an app reads them.
struct Read {
  std::vector<json::object> chunks;
  bool ended = false;

  std::vector<std::string> types() const {
    std::vector<std::string> out;
    for (const auto& c : chunks)
      out.emplace_back(c.at("type").as_string());
    return out;
  }
  bool has(std::string_view type) const {
    for (const auto& c : chunks)
      if (c.at("type").as_string() == type) return true;
    return false;
  }
  const json::object* first(std::string_view type) const {
    for (const auto& c : chunks)
      if (c.at("type").as_string() == type) return &c;
    return nullptr;
  }
  std::string text() const {
    std::string out;
    for (const auto& c : chunks)
      if (c.at("type").as_string() == "text-delta") out += c.at("delta").as_string();
    return out;
  }
};

class ChatServiceTest : public ::testing::Test {
 protected:
  ChatServiceTest() {
    project_ = fs::temp_directory_path() / ("sb-chat-" + ids::make("t"));
    fs::create_directories(project_);
  }
  ~ChatServiceTest() override {
    if (sessions_) {
      sessions_->shutdown();
      run_until([&] { return sessions_->status().empty(); });
    }
    std::error_code ec;
    fs::remove_all(project_, ec);
  }

  void start(json::array script, permission::Ruleset config_rules = {}) {
    bus_ = bus::EventBus::create();
    auto store = session::SessionStore::open_memory();
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    clients_ = clienttool::ClientToolRegistry::create(io_.get_executor(), bus_);
    permissions_ = permission::PermissionService::create(io_.get_executor(), bus_);
    tools_ = std::make_shared<tool::ToolRegistry>(clients_, tool::RegistryOptions{});
    tools_->add_builtin(tool::make_invalid_tool());
    tools_->add_builtin(tool::make_bash_tool());

    session::Agent build;
    build.name = "build";
    build.permission = {{"*", "*", permission::Action::Allow}};
    build.builtin_rules = build.permission.size();
    session::ServiceDeps deps;
    deps.executor = io_.get_executor();
    deps.bus = bus_;
    deps.store = store_;
    deps.providers.providers["scripted"] =
        provider::make_scripted_provider("scripted", std::move(script));
    deps.providers.default_model = "scripted/default";
    deps.tools = tools_;
    deps.permissions = permissions_;
    deps.questions = std::make_shared<question::QuestionService>(io_.get_executor(), bus_);
    deps.config_rules = std::move(config_rules);
    deps.agents["build"] = build;
    session::ServiceOptions options;
    options.directory = project_;
    options.data_dir = project_ / "data";
    sessions_ = session::SessionService::create(std::move(deps), std::move(options));
    chats_ = make_chats();
  }

  std::shared_ptr<ChatService> make_chats() {
    return ChatService::create(
        ChatDeps{io_.get_executor(), bus_, sessions_, store_, clients_, tools_, permissions_},
        ChatOptions{2000ms});
  }

  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (io_.stopped()) io_.restart();  // it stops whenever it runs out of work
      io_.run_one_for(10ms);
    }
    return true;
  }

  // A request of the app; the response is read until it ends.
  Result<Read> send(ChatRequest request, bool to_end = true) {
    auto out = std::make_shared<std::optional<Result<std::shared_ptr<ChatResponse>>>>();
    asio::co_spawn(io_, chats_->send(std::move(request)),
                   [out](std::exception_ptr e, Result<std::shared_ptr<ChatResponse>> r) {
                     if (e)
                       *out = make_error(ErrorCode::Internal, "send threw");
                     else
                       *out = std::move(r);
                   });
    EXPECT_TRUE(run_until([&] { return out->has_value(); })) << "send did not answer";
    if (!*out) return make_error(ErrorCode::Timeout, "send did not answer");
    if (!**out) return (**out).error();
    response_ = ***out;
    auto read = std::make_shared<Read>();
    response_->follow(0, [read](std::uint64_t, const ChatResponse::Chunk& chunk) {
      if (!chunk) {
        read->ended = true;
        return;
      }
      auto doc = parse_json(*chunk);
      read->chunks.push_back(doc->as_object());
    });
    if (to_end) {
      EXPECT_TRUE(run_until([&] { return read->ended; })) << "the response did not end";
    }
    reading_ = read;
    return *read;
  }

  static ChatRequest user(std::string text, std::string chat = "chat-1") {
    ChatRequest r;
    r.chat_id = std::move(chat);
    r.user_text = std::move(text);
    return r;
  }
  static ChatRequest answers(std::vector<ToolOutput> outputs,
                             std::vector<ApprovalAnswer> approvals = {},
                             std::string chat = "chat-1") {
    ChatRequest r;
    r.chat_id = std::move(chat);
    r.outputs = std::move(outputs);
    r.approvals = std::move(approvals);
    return r;
  }
  static std::vector<clienttool::ToolSpec> app_tools(std::vector<std::string> names) {
    std::vector<clienttool::ToolSpec> out;
    for (auto& n : names)
      out.push_back({n, "the app's " + n, json::object{{"type", "object"}}, false});
    return out;
  }

  std::string session_id(const std::string& chat = "chat-1") {
    auto s = run_to_end(io_, chats_->session_of(chat));
    return s && *s ? **s : std::string();
  }
  bool idle(const std::string& chat = "chat-1") {
    return !sessions_->status().contains(session_id(chat));
  }
  std::vector<session::MessageWithParts> messages(const std::string& chat = "chat-1") {
    auto list = run_to_end(io_, sessions_->messages(session_id(chat)));
    return list ? std::move(*list) : std::vector<session::MessageWithParts>{};
  }
  static std::string call_id(const Read& r) {
    auto* c = r.first("tool-input-available");
    return c ? std::string(c->at("toolCallId").as_string()) : std::string();
  }

  asio::io_context io_;
  fs::path project_;
  std::shared_ptr<bus::EventBus> bus_;
  std::shared_ptr<session::SessionStore> store_;
  std::shared_ptr<clienttool::ClientToolRegistry> clients_;
  std::shared_ptr<permission::PermissionService> permissions_;
  std::shared_ptr<tool::ToolRegistry> tools_;
  std::shared_ptr<session::SessionService> sessions_;
  std::shared_ptr<ChatService> chats_;
  std::shared_ptr<ChatResponse> response_;
  std::shared_ptr<Read> reading_;
};

json::array script(std::string_view text) {
  return parse_json(text)->as_array();
}

TEST_F(ChatServiceTest, TextAnswerStreamsAsOneStepOfTheAnswer) {
  start(script(R"([{"text": "hello there"}])"));
  auto r = send(user("hi"));
  ASSERT_TRUE(r) << r.error().message;
  auto types = r->types();
  ASSERT_GE(types.size(), 7u);
  EXPECT_EQ(types.front(), "start");
  EXPECT_EQ(types.back(), "finish");
  EXPECT_EQ(r->chunks.back().at("finishReason").as_string(), "stop");
  EXPECT_EQ(r->text(), "hello there");
  // The user's own message is not streamed back: the only text is the answer's, in a step.
  auto step = std::find(types.begin(), types.end(), "start-step");
  auto text = std::find(types.begin(), types.end(), "text-start");
  EXPECT_LT(step, text);
  EXPECT_EQ(std::count(types.begin(), types.end(), "text-start"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "text-end"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "finish-step"), 1);
  auto* session = r->first("data-session");
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->at("data").at("sessionID").as_string(), session_id());
  EXPECT_TRUE(run_until([&] { return idle(); }));
  EXPECT_EQ(messages().size(), 2u);
}

TEST_F(ChatServiceTest, AppToolSuspendsTheTurnUntilItsOutputComes) {
  start(script(R"([{"toolCalls": [{"tool": "getLocation", "input": {}}]},
                   {"text": "You are in {{lastToolOutput}}"}])"));
  auto first = user("where am I?");
  first.tools = app_tools({"getLocation"});
  auto r = send(std::move(first));
  ASSERT_TRUE(r) << r.error().message;
  // The model called the app's tool by the app's name; the response ended for the app to run it.
  auto* input = r->first("tool-input-available");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->at("toolName").as_string(), "getLocation");
  EXPECT_FALSE(input->contains("providerExecuted"));
  EXPECT_EQ(r->chunks.back().at("finishReason").as_string(), "tool-calls");
  EXPECT_FALSE(idle()) << "the turn waits on the server";

  auto next = send(answers({{call_id(*r), true, json::object{{"city", "Paris"}}, {}}}));
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->text(), R"(You are in {"city":"Paris"})");
  // The app has its own output: it is not sent back.
  EXPECT_FALSE(next->has("tool-output-available"));
  EXPECT_FALSE(next->has("error"));
  EXPECT_EQ(next->chunks.front().at("messageId"), r->chunks.front().at("messageId"))
      << "the continuation is the same answer";
  EXPECT_TRUE(run_until([&] { return idle(); }));
}

TEST_F(ChatServiceTest, AnOutputCountsOnceAndUnknownCallsAreSaid) {
  start(script(R"([{"toolCalls": [{"tool": "getLocation", "input": {}}]}, {"text": "ok"}])"));
  auto first = user("where?");
  first.tools = app_tools({"getLocation"});
  auto r = send(std::move(first));
  ASSERT_TRUE(r) << r.error().message;
  std::string call = call_id(*r);

  // An output for a call that was never made: said, and the turn still waits for the real one.
  auto wrong = send(answers({{"call_nope", true, json::value("x"), {}}}));
  ASSERT_TRUE(wrong) << wrong.error().message;
  auto* error = wrong->first("error");
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error->at("errorText").as_string()).find("call_nope"), std::string::npos);
  EXPECT_EQ(wrong->chunks.back().at("type").as_string(), "finish");
  EXPECT_FALSE(idle());

  auto right = send(answers({{call, true, json::value("here"), {}}}));
  ASSERT_TRUE(right) << right.error().message;
  EXPECT_EQ(right->text(), "ok");
  ASSERT_TRUE(run_until([&] { return idle(); }));
  // The same output again, after the turn: not used, and the app hears why.
  auto again = send(answers({{call, true, json::value("here"), {}}}));
  ASSERT_TRUE(again) << again.error().message;
  ASSERT_TRUE(again->has("error"));
  EXPECT_EQ(messages().size(), 3u) << "user, the call's step, the answer: nothing more";
}

TEST_F(ChatServiceTest, TwoAppCallsInOneStepWaitForBoth) {
  start(script(R"([{"toolCalls": [{"tool": "getLocation", "input": {}},
                                  {"tool": "getTime", "input": {}}]},
                   {"text": "both: {{lastToolOutput}}"}])"));
  auto first = user("where and when?");
  first.tools = app_tools({"getLocation", "getTime"});
  auto r = send(std::move(first));
  ASSERT_TRUE(r) << r.error().message;
  std::vector<std::string> calls;
  for (const auto& c : r->chunks)
    if (c.at("type").as_string() == "tool-input-available")
      calls.emplace_back(c.at("toolCallId").as_string());
  ASSERT_EQ(calls.size(), 2u) << "both calls are in the first response";

  // One output: the response ends at once, the other still waits.
  auto half = send(answers({{calls[0], true, json::value("Paris"), {}}}));
  ASSERT_TRUE(half) << half.error().message;
  EXPECT_FALSE(half->has("text-delta"));
  EXPECT_EQ(half->chunks.back().at("finishReason").as_string(), "tool-calls");
  EXPECT_FALSE(idle());

  auto rest = send(answers(
      {{calls[0], true, json::value("Paris"), {}}, {calls[1], true, json::value("noon"), {}}}));
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_FALSE(rest->has("error")) << "the first output again is history, not an error";
  EXPECT_NE(rest->text().find("both: "), std::string::npos);
}

TEST_F(ChatServiceTest, ApprovalsAreToolApprovalRequests) {
  start(script(R"([{"toolCalls": [{"tool": "bash", "input": {"command": "echo approved",
                                                               "description": "say"}}]},
                   {"text": "ran it"},
                   {"toolCalls": [{"tool": "bash", "input": {"command": "echo refused",
                                                              "description": "say"}}]},
                   {"text": "not reached"}])"),
        {{"bash", "*", permission::Action::Ask}});
  auto r = send(user("run it"));
  ASSERT_TRUE(r) << r.error().message;
  auto* ask = r->first("tool-approval-request");
  ASSERT_NE(ask, nullptr);
  EXPECT_EQ(ask->at("toolCallId").as_string(), call_id(*r));
  EXPECT_EQ(r->chunks.back().at("type").as_string(), "finish");

  ApprovalAnswer yes{std::string(ask->at("approvalId").as_string()), call_id(*r), true, {}};
  auto ran = send(answers({}, {yes}));
  ASSERT_TRUE(ran) << ran.error().message;
  auto* output = ran->first("tool-output-available");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->at("output").as_string(), "approved\n");
  EXPECT_EQ(ran->text(), "ran it");
  ASSERT_TRUE(run_until([&] { return idle(); }));

  auto second = send(user("again"));
  ASSERT_TRUE(second) << second.error().message;
  auto* ask2 = second->first("tool-approval-request");
  ASSERT_NE(ask2, nullptr);
  ApprovalAnswer no{std::string(ask2->at("approvalId").as_string()), call_id(*second), false, {}};
  auto refused = send(answers({}, {no}));
  ASSERT_TRUE(refused) << refused.error().message;
  EXPECT_TRUE(refused->has("tool-output-denied"));
  EXPECT_FALSE(refused->has("tool-output-available"));
  EXPECT_EQ(refused->text(), "") << "a bare refusal stops the turn";
  EXPECT_TRUE(run_until([&] { return idle(); }));
}

TEST_F(ChatServiceTest, AClosedResponseStopsTheTurnUnlessTheChatIsResumable) {
  start(script(R"([{"text": "one two three four five six seven eight", "chunkDelayMs": 100},
                   {"text": "a b c d e f g h i j", "chunkDelayMs": 50}])"));
  auto r = send(user("talk"), false);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(run_until([&] { return reading_->has("text-delta"); }));
  chats_->reader_left("chat-1", response_);
  ASSERT_TRUE(run_until([&] { return idle(); }, 3s)) << "stop() ends the turn";
  auto stored = messages();
  ASSERT_EQ(stored.size(), 2u);
  ASSERT_TRUE(stored[1].info.error);
  EXPECT_EQ(stored[1].info.error->name, "MessageAbortedError");

  auto resumable = user("talk again");
  resumable.resumable = true;
  auto again = send(std::move(resumable), false);
  ASSERT_TRUE(again) << again.error().message;
  auto left = response_;
  chats_->reader_left("chat-1", left);
  // Still streaming: resumed from its start, it runs to the end.
  auto active = run_to_end(io_, chats_->active("chat-1"));
  ASSERT_TRUE(active);
  ASSERT_EQ(*active, left);
  auto replay = std::make_shared<Read>();
  left->follow(0, [replay](std::uint64_t, const ChatResponse::Chunk& c) {
    if (!c)
      replay->ended = true;
    else
      replay->chunks.push_back(parse_json(*c)->as_object());
  });
  ASSERT_TRUE(run_until([&] { return replay->ended; }));
  EXPECT_EQ(replay->chunks.front().at("type").as_string(), "start");
  EXPECT_EQ(replay->text(), "a b c d e f g h i j");
  ASSERT_TRUE(run_until([&] { return idle(); }));
  auto after = run_to_end(io_, chats_->active("chat-1"));
  ASSERT_TRUE(after);
  EXPECT_EQ(*after, nullptr) << "nothing streams: 204";
  EXPECT_FALSE(run_to_end(io_, chats_->active("never-used"))) << "a chat never used: 404";
}

TEST_F(ChatServiceTest, RegenerateReplacesTheLastAnswer) {
  start(script(R"([{"text": "first answer to {{lastUserText}}"},
                   {"text": "second answer"}])"));
  ASSERT_TRUE(send(user("question")));
  ASSERT_TRUE(run_until([&] { return idle(); }));
  std::string question_id = messages().at(0).info.id;
  ChatRequest regenerate;
  regenerate.chat_id = "chat-1";
  regenerate.trigger = ChatRequest::Trigger::Regenerate;
  auto r = send(std::move(regenerate));
  ASSERT_TRUE(r) << r.error().message;
  // The script's step is the number of answers in the history: the same step plays again.
  EXPECT_EQ(r->text(), "first answer to question");
  ASSERT_TRUE(run_until([&] { return idle(); }));
  auto stored = messages();
  ASSERT_EQ(stored.size(), 2u) << "one question, one answer";
  EXPECT_EQ(stored[0].info.id, question_id) << "the question stays; only its answer is new";
  EXPECT_EQ(stored[1].info.parent_id, question_id);
}

TEST_F(ChatServiceTest, ANewMessageEndsTheTurnThatWaitsForTheApp) {
  start(script(R"([{"toolCalls": [{"tool": "confirm", "input": {}}]},
                   {"text": "fresh start"}])"));
  auto first = user("delete it");
  first.tools = app_tools({"confirm"});
  auto r = send(std::move(first));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_FALSE(idle());
  auto next = user("never mind");
  next.tools = app_tools({"confirm"});
  auto fresh = send(std::move(next));
  ASSERT_TRUE(fresh) << fresh.error().message;
  EXPECT_EQ(fresh->text(), "fresh start");
  auto stored = messages();
  ASSERT_GE(stored.size(), 2u);
  ASSERT_TRUE(stored[1].info.error) << "the waiting turn was aborted";
  EXPECT_EQ(stored[1].info.error->name, "MessageAbortedError");
}

TEST_F(ChatServiceTest, BadRequestsAreRefusedAndLoseNothing) {
  start(script(R"([{"text": "slow answer here", "chunkDelayMs": 100}])"));
  auto shadow = user("hi");
  shadow.tools = app_tools({"bash"});
  auto refused = send(std::move(shadow));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::InvalidRequest);
  EXPECT_NE(refused.error().message.find("tools.bash"), std::string::npos);

  auto wordy = user("hi");
  wordy.tools = app_tools({"tell"});
  wordy.tools->front().description = std::string(9000, 'x');
  auto too_large = send(std::move(wordy));
  ASSERT_FALSE(too_large) << "a chat's tools have a client's limits";
  EXPECT_EQ(too_large.error().code, ErrorCode::TooLarge);
  EXPECT_NE(too_large.error().message.find("tools[0].description"), std::string::npos)
      << too_large.error().message;

  auto model = user("hi");
  model.model = "nope/none";
  auto unknown = send(std::move(model));
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::InvalidRequest);

  ASSERT_TRUE(send(user("hi"), false));
  auto second = send(user("again"), false);
  ASSERT_FALSE(second) << "a second message while the answer streams";
  EXPECT_EQ(second.error().code, ErrorCode::Conflict);
  ASSERT_TRUE(run_until([&] { return idle(); }));
}

TEST_F(ChatServiceTest, ItsClientsToolsAreTheAppsWhileThatClientHasNoConnection) {
  start(script(R"([{"toolCalls": [{"tool": "client_web-1_clipboard", "input": {}}]},
                   {"text": "pasted {{lastToolOutput}}"}])"));
  // The app's client registered a tool and has no live connection (a page between reloads).
  ASSERT_TRUE(clients_->register_tools(
      "web-1", {{"clipboard", "reads the clipboard", json::object{{"type", "object"}}, false}}));
  auto first = user("paste it");
  first.client_id = "web-1";
  auto r = send(std::move(first));
  ASSERT_TRUE(r) << r.error().message;
  auto* input = r->first("tool-input-available");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->at("toolName").as_string(), "clipboard") << "named as the client named it";
  EXPECT_FALSE(input->contains("providerExecuted"));
  EXPECT_EQ(r->chunks.back().at("type").as_string(), "finish");

  auto answered = answers({{call_id(*r), true, json::value("hello"), {}}});
  answered.client_id = "web-1";
  auto next = send(std::move(answered));
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->text(), "pasted hello");

  // Another client may not use the chat.
  auto other = user("mine now");
  other.client_id = "web-2";
  auto refused = send(std::move(other));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Forbidden);
}

TEST_F(ChatServiceTest, AChatKeptBetweenTurnsFollowsItsToolsAndItsSession) {
  start(script(R"([{"toolCalls": [{"tool": "first", "input": {}}]}, {"text": "one"},
                   {"toolCalls": [{"tool": "second", "input": {}}]}, {"text": "two"},
                   {"text": "fresh"}])"));
  auto turn1 = user("1");
  turn1.tools = app_tools({"first"});
  auto r1 = send(std::move(turn1));
  ASSERT_TRUE(r1) << r1.error().message;
  auto done1 = answers({{call_id(*r1), true, json::value("ok"), {}}});
  done1.tools = app_tools({"first"});
  ASSERT_TRUE(send(std::move(done1)));
  ASSERT_TRUE(run_until([&] { return idle(); }));

  // The app's tools changed: the model is offered the new ones.
  auto turn2 = user("2");
  turn2.tools = app_tools({"second"});
  auto r2 = send(std::move(turn2));
  ASSERT_TRUE(r2) << r2.error().message;
  auto* input = r2->first("tool-input-available");
  ASSERT_NE(input, nullptr) << "the model's call of the new tool is the app's";
  EXPECT_EQ(input->at("toolName").as_string(), "second");
  EXPECT_FALSE(r2->has("tool-input-error"));
  auto done2 = answers({{call_id(*r2), true, json::value("ok"), {}}});
  done2.tools = app_tools({"second"});
  ASSERT_TRUE(send(std::move(done2)));
  ASSERT_TRUE(run_until([&] { return idle(); }));

  // Its session deleted between turns: the chat starts a new one.
  std::string old_session = session_id();
  ASSERT_TRUE(run_to_end(io_, sessions_->delete_session(old_session)));
  auto r3 = send(user("3"));
  ASSERT_TRUE(r3) << r3.error().message;
  EXPECT_NE(session_id(), old_session);
  EXPECT_EQ(r3->text(), "one") << "a new session: the script starts over";
}

TEST_F(ChatServiceTest, TheChatFindsItsSessionAfterARestart) {
  start(script(R"([{"text": "one"}, {"text": "two"}])"));
  ASSERT_TRUE(send(user("first")));
  ASSERT_TRUE(run_until([&] { return idle(); }));
  std::string before = session_id();
  chats_ = make_chats();  // a new service on the same store, as after a restart
  EXPECT_EQ(session_id(), before);
  auto r = send(user("second"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->text(), "two");
  ASSERT_TRUE(run_until([&] { return idle(); }));
  EXPECT_EQ(messages().size(), 4u);
}

}  // namespace
}  // namespace sb::chat
