#include "session/types.hpp"

#include "session/conversation_cache.hpp"

#include <gtest/gtest.h>

namespace sb::session {
namespace {

// What a reader of the text gets back: the JSON parsed, then read as the type again.
template <class T, class F>
T read_back(const T& item, F from_json) {
  auto doc = parse_json(json_text(item));
  EXPECT_TRUE(doc && doc->is_object()) << json_text(item);
  auto back = from_json(doc->get_object());
  EXPECT_TRUE(back) << json_text(item);
  return *back;
}

Part part(Part::Type type, std::string id) {
  Part p;
  p.id = std::move(id);
  p.session_id = "ses_1";
  p.message_id = "msg_1";
  p.type = type;
  return p;
}

Part tool_part(ToolState::Status status) {
  Part p = part(Part::Type::Tool, "prt_1");
  p.call_id = "call_1";
  p.tool = "bash";
  p.state.status = status;
  p.state.input = json::object{{"command", "echo \"hi\"\n"}, {"depth", json::object{{"n", 1}}}};
  p.state.raw = "{\"comm";
  p.state.title = "Echo";
  p.state.metadata = json::object{{"exit", 0}, {"truncated", false}};
  p.state.output = "hi\n\ttab \x01 control \xc3\xa9";
  p.state.error = "it failed";
  p.state.attachments = json::array{json::object{{"mime", "image/png"}, {"url", "data:x"}}};
  p.state.start = 10;
  p.state.end = 20;
  return p;
}

// The wire shape of a completed tool part, key by key (OpenCode's V1 names).
TEST(SessionJson, ACompletedToolPartHasTheV1Shape) {
  auto doc = parse_json(json_text(tool_part(ToolState::Status::Completed)));
  ASSERT_TRUE(doc);
  json::value want = {{"id", "prt_1"},
                      {"sessionID", "ses_1"},
                      {"messageID", "msg_1"},
                      {"type", "tool"},
                      {"callID", "call_1"},
                      {"tool", "bash"},
                      {"state",
                       {{"status", "completed"},
                        {"input", {{"command", "echo \"hi\"\n"}, {"depth", {{"n", 1}}}}},
                        {"output", "hi\n\ttab \x01 control \xc3\xa9"},
                        {"title", "Echo"},
                        {"metadata", {{"exit", 0}, {"truncated", false}}},
                        {"time", {{"start", 10}, {"end", 20}}},
                        {"attachments", json::array{{{"mime", "image/png"}, {"url", "data:x"}}}}}}};
  EXPECT_EQ(*doc, want) << json_text(tool_part(ToolState::Status::Completed));
}

TEST(SessionJson, ToolPartsReadBackInEveryState) {
  using S = ToolState::Status;
  for (S status : {S::Pending, S::Running, S::Completed, S::Error}) {
    Part p = tool_part(status);
    Part back = read_back(p, part_from_json);
    EXPECT_EQ(back.state.status, status);
    EXPECT_EQ(back.state.input, p.state.input);
    EXPECT_EQ(back.state.raw, status == S::Pending ? p.state.raw : "");
    EXPECT_EQ(back.state.output, status == S::Completed ? p.state.output : "");
    EXPECT_EQ(back.state.error, status == S::Error ? p.state.error : "");
    EXPECT_EQ(back.state.metadata, status == S::Pending ? json::object{} : p.state.metadata);
    EXPECT_EQ(back.state.start, status == S::Pending ? 0 : 10);
    EXPECT_EQ(back.state.end, status == S::Completed || status == S::Error ? 20 : 0);
    // A running call without a title has none (not an empty one).
    EXPECT_EQ(back.state.title, status == S::Running || status == S::Completed ? "Echo" : "");
  }
}

TEST(SessionJson, TextReasoningAndStepPartsReadBack) {
  Part text = part(Part::Type::Reasoning, "prt_t");
  text.text = "line one\nline \"two\"";
  text.start = 5;
  Part back = read_back(text, part_from_json);
  EXPECT_EQ(back.type, Part::Type::Reasoning);
  EXPECT_EQ(back.text, text.text);
  EXPECT_EQ(back.start, 5);
  EXPECT_EQ(back.end, 0) << "an unfinished text has no end";

  Part finish = part(Part::Type::StepFinish, "prt_f");
  finish.reason = "tool-calls";
  finish.cost = 0.25;
  finish.tokens = {11, 7, 3, 2, 1};
  back = read_back(finish, part_from_json);
  EXPECT_EQ(back.reason, "tool-calls");
  EXPECT_EQ(back.cost, 0.25);
  EXPECT_EQ(back.tokens.input, 11);
  EXPECT_EQ(back.tokens.output, 7);
  EXPECT_EQ(back.tokens.reasoning, 3);
  EXPECT_EQ(back.tokens.cache_read, 2);
  EXPECT_EQ(back.tokens.cache_write, 1);
}

TEST(SessionJson, ACompactionPartAndASummaryReadBack) {
  Part ask = part(Part::Type::Compaction, "prt_c");
  ask.auto_continue = true;
  Part back = read_back(ask, part_from_json);
  EXPECT_EQ(back.type, Part::Type::Compaction);
  EXPECT_TRUE(back.auto_continue);
  EXPECT_EQ(to_json(ask).at("auto"), json::value(true));

  MessageInfo summary;
  summary.id = "msg_s";
  summary.role = MessageInfo::Role::Assistant;
  summary.summary = true;
  EXPECT_TRUE(read_back(summary, message_from_json).summary);
  summary.summary = false;
  EXPECT_FALSE(to_json(summary).contains("summary")) << "only a summary says so";
}

// The model's view starts at the question of the last summary that succeeded.
TEST(SessionHistory, StartsAtTheQuestionOfTheLastGoodSummary) {
  auto message = [](std::string id, MessageInfo::Role role, std::string parent = {}) {
    MessageWithParts m;
    m.info.id = std::move(id);
    m.info.role = role;
    m.info.parent_id = std::move(parent);
    m.info.completed = 1;
    return m;
  };
  using R = MessageInfo::Role;
  std::vector<MessageWithParts> stored{message("msg_1", R::User),
                                       message("msg_2", R::Assistant, "msg_1")};
  EXPECT_EQ(history_start(stored), 0u) << "no summary: everything";

  stored.push_back(message("msg_3", R::User));
  stored.push_back(message("msg_4", R::Assistant, "msg_3"));
  stored.back().info.summary = true;
  stored.push_back(message("msg_5", R::User));
  EXPECT_EQ(history_start(stored), 2u);

  // A later summary that failed, or that is still being written, does not count.
  stored.push_back(message("msg_6", R::User));
  stored.push_back(message("msg_7", R::Assistant, "msg_6"));
  stored.back().info.summary = true;
  stored.back().info.error = NamedError{"APIError", "too long", {}};
  EXPECT_EQ(history_start(stored), 2u);
  stored.back().info.error.reset();
  stored.back().info.completed.reset();
  EXPECT_EQ(history_start(stored), 2u);
  stored.back().info.completed = 2;
  EXPECT_EQ(history_start(stored), 5u);

  // The question the summary answers reads as the question of a summary.
  MessageWithParts question = message("msg_q", R::User);
  question.parts.push_back(part(Part::Type::Compaction, "prt_q"));
  std::vector<provider::ModelMessage> out;
  append_history(question, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, kSummaryQuestion);
}

TEST(SessionJson, MessagesReadBackWithTheirErrors) {
  MessageInfo user;
  user.id = "msg_u";
  user.session_id = "ses_1";
  user.created = 1;
  user.agent = "build";
  user.provider_id = "openai";
  user.model_id = "gpt";
  MessageInfo u = read_back(user, message_from_json);
  EXPECT_EQ(u.role, MessageInfo::Role::User);
  EXPECT_EQ(u.provider_id, "openai");
  EXPECT_EQ(u.model_id, "gpt");
  EXPECT_FALSE(u.completed);
  EXPECT_FALSE(to_json(user).contains("tools")) << "no switches, no field";
  // The prompt's tool switches (what a turn that goes on after a restart offers).
  user.tools = {{"bash", false}, {"client_c1_t", true}};
  EXPECT_EQ(to_json(user).at("tools"), (json::object{{"bash", false}, {"client_c1_t", true}}));
  EXPECT_EQ(read_back(user, message_from_json).tools, user.tools);

  MessageInfo a = user;
  a.id = "msg_a";
  a.role = MessageInfo::Role::Assistant;
  a.parent_id = "msg_u";
  a.completed = 9;
  a.cwd = "/project \"x\"";
  a.cost = 1.5;
  a.tokens = {1, 2, 3, 4, 5};
  a.finish = "stop";
  a.error = NamedError{"APIError", "rate \"limited\"", json::object{{"statusCode", 429}}};
  MessageInfo back = read_back(a, message_from_json);
  EXPECT_EQ(back.role, MessageInfo::Role::Assistant);
  EXPECT_EQ(back.parent_id, "msg_u");
  EXPECT_EQ(back.completed, 9);
  EXPECT_EQ(back.cwd, a.cwd);
  EXPECT_EQ(back.cost, 1.5);
  EXPECT_EQ(back.tokens.cache_write, 5);
  EXPECT_EQ(back.finish, "stop");
  ASSERT_TRUE(back.error);
  EXPECT_EQ(back.error->name, "APIError");
  EXPECT_EQ(back.error->message, a.error->message);
  EXPECT_EQ(back.error->data, (json::object{{"statusCode", 429}}));
  // On the wire the message is in data, beside the other fields (OpenCode's NamedError).
  json::object tree = to_json(a);
  EXPECT_EQ(tree.at("error").at("data").at("message").as_string(), a.error->message);
}

TEST(SessionJson, SessionsReadBackWithTheirOptionalFields) {
  SessionInfo s;
  s.id = "ses_1";
  s.title = "A \"title\"";
  s.directory = "/p";
  s.created = 1;
  s.updated = 2;
  SessionInfo plain = read_back(s, session_from_json);
  EXPECT_EQ(plain.title, s.title);
  EXPECT_FALSE(to_json(s).contains("parentID")) << "absent, not empty";
  EXPECT_FALSE(to_json(s).contains("approved")) << "absent, not empty";
  s.parent_id = "ses_0";
  s.client_id = "ide";
  s.permission = {{"bash", "*", permission::Action::Ask},
                  {"edit", "src/*", permission::Action::Deny}};
  s.approved = {{"bash", "git status", permission::Action::Allow}};
  SessionInfo full = read_back(s, session_from_json);
  EXPECT_EQ(full.parent_id, "ses_0");
  EXPECT_EQ(full.client_id, "ide");
  EXPECT_EQ(full.permission, s.permission);
  EXPECT_EQ(full.approved, s.approved);
  EXPECT_EQ(full.updated, 2);
  EXPECT_EQ(to_json(s).at("permission"),
            json::parse(R"([{"permission":"bash","pattern":"*","action":"ask"},)"
                        R"({"permission":"edit","pattern":"src/*","action":"deny"}])"))
      << "OpenCode's PermissionRule shape";
}

// An older build stored rules as given, e.g. a number as a pattern. Such a session is read (the
// server starts, lists it, shows it), keeps its rules as stored when written back, and says why
// they do not decode; it is the service that refuses to run it (SessionService tests). Approved
// rules that do not read (no build writes such) are dropped: the session asks again.
TEST(SessionJson, StoredRulesThatDoNotDecodeAreKeptAsStoredWithWhy) {
  auto stored =
      json::parse(R"({"id":"ses_1","title":"t","directory":"/p","time":{"created":1,"updated":2},)"
                  R"("permission":[{"permission":"bash","pattern":7,"action":"deny"}],)"
                  R"("approved":[{"permission":"bash","pattern":7,"action":"allow"}]})");
  auto s = session_from_json(stored.as_object());
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_TRUE(s->unreadable_permission);
  EXPECT_EQ(s->unreadable_permission->why, "permission[0].pattern must be a string, got number");
  EXPECT_TRUE(s->permission.empty());
  EXPECT_EQ(to_json(*s).at("permission"), stored.at("permission")) << "written back unchanged";
  EXPECT_TRUE(s->approved.empty());
}

TEST(SessionJson, AMessageWithPartsIsInfoAndPartsInOrder) {
  MessageWithParts m;
  m.info.id = "msg_1";
  m.info.session_id = "ses_1";
  m.info.role = MessageInfo::Role::Assistant;
  m.parts = {tool_part(ToolState::Status::Running), tool_part(ToolState::Status::Error)};
  m.parts[1].id = "prt_2";
  auto doc = parse_json(json_text(m));
  ASSERT_TRUE(doc && doc->is_object());
  EXPECT_EQ(doc->at("info").at("id").as_string(), "msg_1");
  const auto& parts = doc->at("parts").as_array();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].at("state").at("status").as_string(), "running");
  EXPECT_EQ(parts[1].at("id").as_string(), "prt_2");
}

}  // namespace
TEST(SessionJson, NumbersOutOfRangeReadAsZeroNotUndefined) {
  // A part edited through PATCH is read with this reader: 1e300 as a time must not be cast.
  auto p = part_from_json(json::parse(R"({"id":"prt_1","sessionID":"ses_1","messageID":"msg_1",
      "type":"text","text":"x","time":{"start":1e300,"end":-1e300}})")
                              .as_object());
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->start, 0);
  EXPECT_EQ(p->end, 0);
}

}  // namespace sb::session
