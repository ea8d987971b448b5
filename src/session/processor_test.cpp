// Turns run in-process, as the server runs them: the scripted model, an in-memory store, a real
// tool registry (read, bash, invalid, and the client tools of the real ClientToolRegistry) and
// the permission service, all on one io_context. Each test asserts what a user sees: the
// session's messages and parts with their states, its status, and the events on the bus.
#include "session/processor.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include "clienttool/registry.hpp"
#include "session/service.hpp"
#include "tool/builtin/bash.hpp"
#include "tool/builtin/invalid.hpp"
#include "tool/builtin/read.hpp"
#include "util/ids.hpp"
#include "util/run_to_end.hpp"

namespace sb::session {

// Statuses by name in failure messages.
void PrintTo(ToolState::Status status, std::ostream* out) {
  *out << to_string(status);
}

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct SeenEvent {
  std::string type;
  json::object properties;
};

// The scripted model, with a copy of what each step asked it (the system prompt and whether tools
// could be called), as a model server would have seen it.
class RecordingProvider final : public provider::ModelProvider {
 public:
  explicit RecordingProvider(json::array script)
      : inner_(provider::make_scripted_provider("scripted", std::move(script))) {}
  const std::string& id() const override { return inner_->id(); }
  std::string type() const override { return inner_->type(); }
  std::vector<std::string> models() const override { return inner_->models(); }
  asio::awaitable<void> stream(const provider::ModelRequest& request,
                               provider::EventHandler on_event,
                               std::shared_ptr<AbortSignal> abort) override {
    requests.push_back({request.system, request.no_tool_calls});
    co_await inner_->stream(request, std::move(on_event), std::move(abort));
  }

  struct Seen {
    std::string system;
    bool no_tool_calls = false;
  };
  std::vector<Seen> requests;

 private:
  provider::ProviderPtr inner_;
};

// A connected client of the real ClientToolRegistry whose requests the test answers.
class TestClient final : public clienttool::ClientSink {
 public:
  void deliver(std::shared_ptr<const clienttool::ClientMessage> message) override {
    if (message->kind == clienttool::ClientMessage::Kind::Request) requests.push_back(*message);
  }
  void close(const std::string&) override {}
  std::vector<clienttool::ClientMessage> requests;
};

class ProcessorTest : public ::testing::Test {
 protected:
  ProcessorTest() {
    project_ = fs::temp_directory_path() / ("sb-processor-" + ids::make("t"));
    fs::create_directories(project_);
  }
  ~ProcessorTest() override {
    if (service_) {
      service_->shutdown();
      run_until([&] { return service_->status().empty(); });
    }
    std::error_code ec;
    fs::remove_all(project_, ec);
  }

  // The service with the scripted model playing `script`; `config_rules` as the config file's
  // "permission", the build agent with OpenCode's defaults and `max_steps`.
  void start(json::array script, permission::Ruleset config_rules = {}, int max_steps = 100) {
    bus_ = bus::EventBus::create();
    subscription_ = bus_->subscribe([this](const bus::EventPtr& e) {
      events_.push_back({e->type, e->properties});
    });
    auto store = SessionStore::open_memory();
    ASSERT_TRUE(store) << store.error().message;
    clients_ = clienttool::ClientToolRegistry::create(io_.get_executor(), bus_);
    permissions_ = permission::PermissionService::create(io_.get_executor(), bus_);
    auto tools = std::make_shared<tool::ToolRegistry>(clients_, tool::RegistryOptions{});
    tools->add_builtin(tool::make_invalid_tool());
    tools->add_builtin(tool::make_bash_tool());
    tools->add_builtin(tool::make_read_tool());
    model_ = std::make_shared<RecordingProvider>(std::move(script));

    Agent build;
    build.name = "build";
    build.max_steps = max_steps;
    build.permission = {{"*", "*", permission::Action::Allow},
                        {"external_directory", "*", permission::Action::Ask},
                        {"doom_loop", "*", permission::Action::Ask}};
    build.builtin_rules = build.permission.size();

    ServiceDeps deps;
    deps.executor = io_.get_executor();
    deps.bus = bus_;
    deps.store = std::move(*store);
    deps.providers.providers["scripted"] = model_;
    deps.providers.default_model = "scripted/default";
    deps.tools = tools;
    deps.permissions = permissions_;
    deps.questions = std::make_shared<question::QuestionService>(io_.get_executor(), bus_);
    deps.config_rules = std::move(config_rules);
    deps.agents["build"] = build;
    ServiceOptions options;
    options.directory = project_;
    options.data_dir = project_ / "data";
    service_ = SessionService::create(std::move(deps), std::move(options));
    auto session = run_to_end(io_, service_->create_session({}));
    ASSERT_TRUE(session) << session.error().message;
    sid_ = session->id;
  }

  // Runs the io_context until `done` holds; false when `limit` passes first.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.run_one_for(10ms);
    }
    return true;
  }

  // Runs a turn to its end as POST /session/{id}/message does.
  Result<MessageWithParts> prompt(std::string text) {
    // Shared with the handler: a turn that outlives the wait ends later, in the fixture's teardown.
    auto out = std::make_shared<std::optional<Result<MessageWithParts>>>();
    PromptInput input;
    input.text = std::move(text);
    asio::co_spawn(io_, service_->prompt(sid_, std::move(input)),
                   [out](std::exception_ptr e, Result<MessageWithParts> r) {
                     // Not rethrown: an exception out of the io_context would end the test binary.
                     if (e)
                       *out = make_error(ErrorCode::Internal, "the turn threw an exception");
                     else
                       *out = std::move(r);
                   });
    EXPECT_TRUE(run_until([&] { return out->has_value(); })) << "the turn did not end";
    if (!*out) return make_error(ErrorCode::Timeout, "the turn did not end");
    return std::move(**out);
  }

  // Starts a turn as POST /session/{id}/prompt_async does.
  void prompt_async(std::string text) {
    PromptInput input;
    input.text = std::move(text);
    auto started = run_to_end(io_, service_->prompt_async(sid_, std::move(input)));
    ASSERT_TRUE(started) << started.error().message;
  }

  bool idle() { return !service_->status().contains(sid_); }

  std::vector<MessageWithParts> messages() {
    auto list = run_to_end(io_, service_->messages(sid_));
    EXPECT_TRUE(list) << list.error().message;
    return list ? std::move(*list) : std::vector<MessageWithParts>{};
  }

  // The session's tool parts, in order.
  std::vector<Part> tool_parts() {
    std::vector<Part> out;
    for (auto& m : messages())
      for (auto& p : m.parts)
        if (p.type == Part::Type::Tool) out.push_back(p);
    return out;
  }

  static std::string text_of(const MessageWithParts& m) {
    std::string out;
    for (const auto& p : m.parts)
      if (p.type == Part::Type::Text) out += p.text;
    return out;
  }

  std::vector<std::string> event_types() const {
    std::vector<std::string> out;
    for (const auto& e : events_)
      out.push_back(e.type);
    return out;
  }

  // The statuses that message.part.updated showed for the part of `call_id`, in order (a
  // status shown again, as with a progress update, once).
  std::vector<std::string> statuses_of(const std::string& call_id) const {
    std::vector<std::string> out;
    for (const auto& e : events_) {
      if (e.type != "message.part.updated") continue;
      const auto& part = e.properties.at("part").as_object();
      if (auto c = part.if_contains("callID"); c && c->as_string() == call_id)
        if (std::string_view status = part.at("state").as_object().at("status").as_string();
            out.empty() || out.back() != status)
          out.emplace_back(status);
    }
    return out;
  }

  // The session statuses published (session.status), in order.
  std::vector<std::string> session_statuses() const {
    std::vector<std::string> out;
    for (const auto& e : events_)
      if (e.type == "session.status")
        out.emplace_back(e.properties.at("status").as_object().at("type").as_string());
    return out;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  fs::path project_;
  std::shared_ptr<bus::EventBus> bus_;
  bus::Subscription subscription_;
  std::vector<SeenEvent> events_;
  std::shared_ptr<clienttool::ClientToolRegistry> clients_;
  std::shared_ptr<permission::PermissionService> permissions_;
  std::shared_ptr<RecordingProvider> model_;
  std::shared_ptr<SessionService> service_;
  std::string sid_;
};

json::object call(std::string_view tool, json::object input) {
  return json::object{
      {"toolCalls", json::array{json::object{{"tool", tool}, {"input", std::move(input)}}}}};
}

TEST_F(ProcessorTest, ATextAnswerIsStreamedStoredAndEndsIdle) {
  start(json::array{json::object{{"text", "Hello from the model."}}});
  auto reply = prompt("hi");
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_EQ(text_of(*reply), "Hello from the model.");
  EXPECT_EQ(reply->info.finish, "stop");
  EXPECT_FALSE(reply->info.error);

  auto list = messages();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].info.role, MessageInfo::Role::User);
  EXPECT_EQ(text_of(list[0]), "hi");
  EXPECT_EQ(list[1].info.role, MessageInfo::Role::Assistant);
  EXPECT_EQ(list[1].info.parent_id, list[0].info.id);
  std::vector<Part::Type> types;
  for (const auto& p : list[1].parts)
    types.push_back(p.type);
  EXPECT_EQ(types, (std::vector<Part::Type>{Part::Type::StepStart, Part::Type::Text,
                                            Part::Type::StepFinish}));
  // The text reached subscribers as deltas, whole and in order, and the session went idle.
  std::string streamed;
  for (const auto& e : events_)
    if (e.type == "message.part.delta") streamed += e.properties.at("delta").as_string();
  EXPECT_EQ(streamed, "Hello from the model.");
  EXPECT_EQ(session_statuses(), (std::vector<std::string>{"busy", "idle"}));
  EXPECT_EQ(event_types().back(), "session.idle");
  EXPECT_TRUE(idle());
}

TEST_F(ProcessorTest, AServerToolRunsAndItsResultGoesToTheModel) {
  { std::ofstream(project_ / "notes.txt") << "alpha\nbeta\n"; }
  start(json::array{call("read", {{"filePath", (project_ / "notes.txt").string()}}),
                    json::object{{"text", "The file says: {{lastToolOutput}}"}}});
  auto reply = prompt("read my notes");
  ASSERT_TRUE(reply) << reply.error().message;

  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].tool, "read");
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Completed) << parts[0].state.error;
  EXPECT_NE(parts[0].state.output.find("alpha"), std::string::npos) << parts[0].state.output;
  EXPECT_EQ(statuses_of(parts[0].call_id),
            (std::vector<std::string>{"pending", "running", "completed"}));
  // The model's next step saw the output.
  EXPECT_NE(text_of(*reply).find("beta"), std::string::npos) << text_of(*reply);
  EXPECT_EQ(messages().size(), 3u);  // the user's, the step with the call, the answer
  EXPECT_EQ(model_->requests.size(), 2u);
}

TEST_F(ProcessorTest, AClientToolCallGoesToItsClientAndItsAnswerToTheModel) {
  start(json::array{call("client_c1_lookup", {{"text", "switchboard"}}),
                    json::object{{"text", "Found: {{lastToolOutput}}"}}});
  clienttool::ToolSpec spec;
  spec.name = "lookup";
  spec.description = "Looks a word up";
  spec.parameters = json::object{{"type", "object"}};
  ASSERT_TRUE(clients_->register_tools("c1", {spec}, sid_));
  auto client = std::make_shared<TestClient>();
  clients_->attach("c1", client, 0, "test");

  prompt_async("look it up");
  ASSERT_TRUE(run_until([&] { return !client->requests.empty(); })) << "the client got no request";
  auto request = parse_json(client->requests[0].request_json);
  ASSERT_TRUE(request);
  ASSERT_TRUE(request->is_object());
  const json::object& sent = request->as_object();
  EXPECT_EQ(sent.at("sessionID"), json::value(sid_)) << client->requests[0].request_json;
  EXPECT_EQ(sent.at("input"), json::value(json::object{{"text", "switchboard"}}));
  auto waiting = tool_parts();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].state.status, ToolState::Status::Running);

  clienttool::ToolResponse answer;
  answer.title = "Looked up";
  answer.output = "a telephone exchange";
  ASSERT_TRUE(clients_->submit_result(client->requests[0].request_id, "c1", answer));
  ASSERT_TRUE(run_until([&] { return idle(); }));

  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].tool, "client_c1_lookup");
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Completed) << parts[0].state.error;
  EXPECT_EQ(parts[0].state.title, "Looked up");
  EXPECT_EQ(parts[0].state.output, "a telephone exchange");
  EXPECT_EQ(text_of(messages().back()), "Found: a telephone exchange");
}

TEST_F(ProcessorTest, AnAskAnsweredOnceRunsTheToolWhileTheSessionAwaitsInput) {
  start(json::array{call("bash", {{"command", "echo approved"}, {"description", "echo"}}),
                    json::object{{"text", "Ran it: {{lastToolOutput}}"}}},
        {{"bash", "*", permission::Action::Ask}});
  prompt_async("run it");
  ASSERT_TRUE(run_until([&] { return !permissions_->list(sid_).empty(); })) << "nothing asked";
  auto asks = permissions_->list(sid_);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].permission, "bash");
  EXPECT_EQ(asks[0].patterns, (std::vector<std::string>{"echo approved"}));
  EXPECT_EQ(service_->status().at(sid_).as_object().at("type").as_string(), "awaiting-input");
  auto waiting = tool_parts();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].state.status, ToolState::Status::Running);

  ASSERT_TRUE(permissions_->reply(asks[0].id, permission::Reply::Once));
  ASSERT_TRUE(run_until([&] { return idle(); }));
  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Completed) << parts[0].state.error;
  EXPECT_NE(parts[0].state.output.find("approved"), std::string::npos) << parts[0].state.output;
  EXPECT_EQ(session_statuses(),
            (std::vector<std::string>{"busy", "awaiting-input", "busy", "idle"}));
  EXPECT_NE(text_of(messages().back()).find("Ran it: approved"), std::string::npos);
}

TEST_F(ProcessorTest, ARejectedAskFailsTheCallAndStopsTheTurn) {
  fs::path marker = project_ / "ran.marker";
  start(json::array{call("bash", {{"command", "touch " + marker.string()}, {"description", "t"}}),
                    json::object{{"text", "must not be asked"}}},
        {{"bash", "*", permission::Action::Ask}});
  prompt_async("run it");
  ASSERT_TRUE(run_until([&] { return !permissions_->list(sid_).empty(); })) << "nothing asked";
  ASSERT_TRUE(permissions_->reply(permissions_->list(sid_)[0].id, permission::Reply::Reject));
  ASSERT_TRUE(run_until([&] { return idle(); }));

  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Error);
  EXPECT_NE(parts[0].state.error.find("rejected"), std::string::npos) << parts[0].state.error;
  EXPECT_FALSE(fs::exists(marker)) << "the rejected command ran";
  EXPECT_EQ(model_->requests.size(), 1u) << "a bare reject stops the turn";
  EXPECT_EQ(statuses_of(parts[0].call_id),
            (std::vector<std::string>{"pending", "running", "error"}));
  // The turn's last message says why it stopped (a reply would otherwise say nothing about it).
  MessageInfo last = messages().back().info;
  ASSERT_TRUE(last.error);
  EXPECT_EQ(last.error->name, "PermissionRejectedError");
  EXPECT_NE(last.error->message.find("rejected"), std::string::npos) << last.error->message;
}

TEST_F(ProcessorTest, ACallARuleDeniesFailsWithoutAnAskAndTheModelGoesOn) {
  start(json::array{call("bash", {{"command", "rm -rf build"}, {"description", "clean"}}),
                    json::object{{"text", "Understood."}}},
        {{"bash", "rm *", permission::Action::Deny}});
  auto reply = prompt("clean up");
  ASSERT_TRUE(reply) << reply.error().message;
  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Error);
  EXPECT_FALSE(parts[0].state.error.empty());
  for (const auto& type : event_types())
    EXPECT_NE(type, "permission.asked");
  EXPECT_EQ(text_of(*reply), "Understood.");
  EXPECT_EQ(model_->requests.size(), 2u);
}

TEST_F(ProcessorTest, AbortMidToolEndsThePartAndTheTurn) {
  start(json::array{call("bash", {{"command", "sleep 30"}, {"description", "sleep"}}),
                    json::object{{"text", "must not be asked"}}});
  prompt_async("sleep");
  ASSERT_TRUE(run_until([&] {
    auto parts = tool_parts();
    return !parts.empty() && parts[0].state.status == ToolState::Status::Running;
  }));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(service_->abort(sid_));
  ASSERT_TRUE(run_until([&] { return idle(); }, 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "the sleep was not stopped";

  auto list = messages();
  ASSERT_EQ(list.size(), 2u);
  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Error);
  ASSERT_TRUE(list.back().info.error);
  EXPECT_EQ(list.back().info.error->name, "MessageAbortedError");
  EXPECT_EQ(model_->requests.size(), 1u);
  EXPECT_FALSE(service_->abort(sid_)) << "nothing is left to abort";
}

TEST_F(ProcessorTest, TheThirdIdenticalCallAsksBeforeItRuns) {
  { std::ofstream(project_ / "notes.txt") << "alpha\n"; }
  json::object again = call("read", {{"filePath", (project_ / "notes.txt").string()}});
  start(json::array{again, again, again, json::object{{"text", "I will stop repeating myself."}}});
  prompt_async("loop");
  ASSERT_TRUE(run_until([&] { return !permissions_->list(sid_).empty(); })) << "no doom_loop ask";
  auto asks = permissions_->list(sid_);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].permission, "doom_loop");
  EXPECT_EQ(asks[0].patterns, (std::vector<std::string>{"read"}));
  auto parts = tool_parts();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].state.status, ToolState::Status::Completed);
  EXPECT_EQ(parts[1].state.status, ToolState::Status::Completed);
  EXPECT_EQ(parts[2].state.status, ToolState::Status::Running);
  EXPECT_EQ(asks[0].call_id, parts[2].call_id);
  EXPECT_EQ(model_->requests.size(), 3u);

  ASSERT_TRUE(permissions_->reply(asks[0].id, permission::Reply::Once));
  ASSERT_TRUE(run_until([&] { return idle(); }));
  parts = tool_parts();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].state.status, ToolState::Status::Completed) << parts[2].state.error;
  EXPECT_EQ(text_of(messages().back()), "I will stop repeating myself.");
  EXPECT_EQ(model_->requests.size(), 4u);
}

TEST_F(ProcessorTest, TheLastStepOfTheAgentsLimitOffersNoToolsAndTheTurnEndsThere) {
  { std::ofstream(project_ / "notes.txt") << "alpha\n"; }
  json::object read = call("read", {{"filePath", (project_ / "notes.txt").string()}});
  // The scripted model calls tools whatever the request says: the turn still ends at the limit.
  start(json::array{read, read, read, json::object{{"text", "never reached"}}}, {}, 2);
  auto reply = prompt("read it");
  ASSERT_TRUE(reply) << reply.error().message;
  ASSERT_EQ(model_->requests.size(), 2u) << "the turn went past the agent's step limit";
  EXPECT_FALSE(model_->requests[0].no_tool_calls);
  EXPECT_EQ(model_->requests[0].system.find("last step"), std::string::npos);
  EXPECT_TRUE(model_->requests[1].no_tool_calls);
  EXPECT_NE(model_->requests[1].system.find("This is the last step of this turn"),
            std::string::npos)
      << model_->requests[1].system;
  EXPECT_EQ(messages().size(), 3u);  // the user's and one per step
  EXPECT_TRUE(idle());
}

// A prompt or a shell command that is refused (an unknown agent) leaves a pending revert as it
// is: its messages stay, and unrevert takes it back.
TEST_F(ProcessorTest, ARefusedPromptOrShellCommandLeavesTheRevertToUnrevert) {
  start(json::array{json::object{{"text", "The first answer."}}});
  ASSERT_TRUE(prompt("hi"));
  auto list = messages();
  ASSERT_EQ(list.size(), 2u);
  auto reverted = run_to_end(io_, service_->revert(sid_, list[0].info.id, ""));
  ASSERT_TRUE(reverted) << reverted.error().message;
  ASSERT_TRUE(reverted->revert);

  // Run to their end as the routes run them.
  auto finish = [&](asio::awaitable<Result<MessageWithParts>> a) -> Result<MessageWithParts> {
    auto out = std::make_shared<std::optional<Result<MessageWithParts>>>();
    asio::co_spawn(io_, std::move(a), [out](std::exception_ptr e, Result<MessageWithParts> r) {
      if (e)
        *out = make_error(ErrorCode::Internal, "it threw an exception");
      else
        *out = std::move(r);
    });
    EXPECT_TRUE(run_until([&] { return out->has_value(); }));
    if (!*out) return make_error(ErrorCode::Timeout, "it did not end");
    return std::move(**out);
  };
  PromptInput bad;
  bad.text = "again";
  bad.agent = "nobody";
  auto refused = finish(service_->prompt(sid_, std::move(bad)));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::InvalidRequest) << refused.error().message;
  PromptInput bad_model;
  bad_model.text = "again";
  bad_model.model = "nowhere/nothing";
  EXPECT_FALSE(finish(service_->prompt(sid_, std::move(bad_model))));
  ShellInput command;
  command.agent = "nobody";
  command.command = "true";
  EXPECT_FALSE(finish(service_->shell(sid_, command)));

  EXPECT_TRUE(idle());
  auto session = run_to_end(io_, service_->get_session(sid_));
  ASSERT_TRUE(session);
  EXPECT_TRUE(session->revert) << "a refused request made the revert final";
  EXPECT_EQ(messages().size(), 2u);
  auto back = run_to_end(io_, service_->unrevert(sid_));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_FALSE(back->revert);
  EXPECT_EQ(messages().size(), 2u);
}

}  // namespace
}  // namespace sb::session
