#include "session/store.hpp"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "clienttool/wire.hpp"
#include "store/postgres.hpp"
#include "store/sqlite.hpp"
#include "test_postgres.hpp"
#include "util/ids.hpp"

namespace sb::session {
namespace {

SessionInfo make_session(const std::string& title, std::int64_t updated) {
  SessionInfo s;
  s.id = ids::make("ses");
  s.title = title;
  s.directory = "/project";
  s.created = updated;
  s.updated = updated;
  return s;
}

MessageInfo make_assistant(const SessionInfo& s) {
  MessageInfo m;
  m.id = ids::make("msg");
  m.session_id = s.id;
  m.role = MessageInfo::Role::Assistant;
  m.created = now_ms();
  m.agent = "build";
  m.provider_id = "scripted";
  m.model_id = "default";
  return m;
}

Part tool_part(const MessageInfo& m, ToolState::Status status) {
  Part p;
  p.id = ids::make("prt");
  p.session_id = m.session_id;
  p.message_id = m.id;
  p.type = Part::Type::Tool;
  p.call_id = "call_1";
  p.tool = "bash";
  p.state.status = status;
  p.state.input = json::object{{"command", "ls"}};
  p.state.start = 1;
  return p;
}

// The ids of each message's parts, in the order they came back.
using PartIds = std::vector<std::vector<std::string>>;
PartIds part_ids(const std::vector<MessageWithParts>& messages) {
  PartIds out;
  for (const auto& m : messages) {
    out.emplace_back();
    for (const auto& p : m.parts)
      out.back().push_back(p.id);
  }
  return out;
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("sb-store-" + ids::make("t"));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

// A store that outlives its object: a file in `dir`, or in the suites' PostgreSQL pass
// (tests/support/test_postgres.hpp) the test's own schema, emptied when `fresh`. Open one at a
// time: each holds its store's lock.
Result<std::unique_ptr<SessionStore>> open_lasting(const TempDir& dir, bool fresh) {
  if (!test::storage_is_postgres()) return SessionStore::open(dir.path());
  auto db = store::PostgresDatabase::open(
      {.url = test::postgres_schema_url(test::schema_name_for(test_name()), fresh)});
  if (!db) return db.error();
  return SessionStore::open(std::shared_ptr<store::Database>(std::move(*db)));
}

// The store of a test that does not reopen it: in memory, or the test's own schema.
Result<std::unique_ptr<SessionStore>> open_store() {
  if (!test::storage_is_postgres()) return SessionStore::open_memory();
  static TempDir unused;
  return open_lasting(unused, true);
}

TEST(SessionStore, SessionsRoundTripAndListByUpdate) {
  auto store = open_store();
  ASSERT_TRUE(store) << store.error().message;
  auto a = make_session("first", 100), b = make_session("second", 200);
  ASSERT_TRUE((*store)->put_session(a));
  ASSERT_TRUE((*store)->put_session(b));
  auto list = (*store)->list_sessions();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].title, "second");
  EXPECT_EQ((*list)[1].title, "first");

  a.title = "renamed";
  a.updated = 300;
  ASSERT_TRUE((*store)->put_session(a));
  auto got = (*store)->get_session(a.id);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->title, "renamed");
  EXPECT_EQ((*got)->directory, "/project");
  EXPECT_EQ((*(*store)->list_sessions())[0].id, a.id);

  auto missing = (*store)->get_session("ses_nope");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(missing->has_value());
}

TEST(SessionStore, DeleteRemovesMessagesAndParts) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  auto m = make_assistant(s);
  ASSERT_TRUE(store->put_message({m, {tool_part(m, ToolState::Status::Completed)}}));
  ASSERT_TRUE(*store->get_session(s.id));
  EXPECT_EQ(*store->delete_session(s.id), true);
  EXPECT_FALSE(*store->get_session(s.id));
  EXPECT_EQ(*store->delete_session(s.id), false);
  EXPECT_TRUE(store->list_messages(s.id)->empty());
  EXPECT_FALSE(*store->get_message(s.id, m.id));
}

TEST(SessionStore, MessagesComeBackInOrderWithTheirParts) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  MessageInfo user;
  user.id = ids::make("msg");
  user.session_id = s.id;
  user.role = MessageInfo::Role::User;
  user.created = 5;
  ASSERT_TRUE(store->put_message({user, {}}));
  auto m = make_assistant(s);
  m.parent_id = user.id;
  m.tokens.input = 10;
  m.tokens.cache_read = 3;
  m.finish = "tool-calls";
  auto p1 = tool_part(m, ToolState::Status::Running);
  ASSERT_TRUE(store->put_message({m, {p1}}));
  auto p2 = tool_part(m, ToolState::Status::Completed);
  p2.state.output = "file.txt\n";
  p2.state.title = "ls";
  p2.state.end = 2;
  // Stored again with a part more: the row is replaced, not added to.
  ASSERT_TRUE(store->put_message({m, {p1, p2}}));

  auto list = store->list_messages(s.id);
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].info.role, MessageInfo::Role::User);
  EXPECT_TRUE((*list)[0].parts.empty());
  const auto& a = (*list)[1];
  EXPECT_EQ(a.info.parent_id, user.id);
  EXPECT_EQ(a.info.tokens.input, 10);
  EXPECT_EQ(a.info.tokens.cache_read, 3);
  EXPECT_EQ(a.info.finish, "tool-calls");
  ASSERT_EQ(a.parts.size(), 2u);
  EXPECT_EQ(a.parts[0].id, p1.id);
  EXPECT_EQ(a.parts[0].state.status, ToolState::Status::Running);
  EXPECT_EQ(a.parts[1].state.output, "file.txt\n");
  EXPECT_EQ(a.parts[1].state.input.at("command").as_string(), "ls");
  auto one = store->get_message(s.id, m.id);
  ASSERT_TRUE(one && *one) << "get_message finds it";
  EXPECT_EQ((*one)->parts.size(), 2u);
  EXPECT_EQ((*one)->info.finish, "tool-calls");
}

// A tool input as deep as a model's arguments may be (they are read with a limit of 128 levels)
// is stored and read back: the row puts it a few levels deeper.
// What a tool or a model produced need not be UTF-8 (a command's binary output, a model's broken
// stream): it is stored as text all the same (PostgreSQL refuses a TEXT value that is not UTF-8,
// so a row that carried such bytes would never be written) and reads back with U+FFFD in their
// place, wherever in the part it is.
TEST(SessionStore, BytesThatAreNotUtf8AreStoredAsReplacementCharacters) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  auto m = make_assistant(s);
  const std::string bad = "ok \xff\xfe\xc3 end";
  auto p = tool_part(m, ToolState::Status::Completed);
  p.state.output = bad;
  p.state.title = bad;
  p.state.raw = bad;
  p.state.metadata = json::object{{"output", bad}, {bad, 1}};
  p.state.input = json::object{{"command", bad}};
  Part text;
  text.id = ids::make("prt");
  text.session_id = s.id;
  text.message_id = m.id;
  text.type = Part::Type::Text;
  text.text = bad;
  m.error = NamedError{"APIError", bad, {}};
  auto stored = store->put_message({m, {p, text}});
  ASSERT_TRUE(stored) << stored.error().message;
  auto back = store->get_message(s.id, m.id);
  ASSERT_TRUE(back && *back) << (back ? "missing" : back.error().message);
  const std::string repaired = "ok \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end";
  const auto& tool = (*back)->parts[0].state;
  EXPECT_EQ(tool.output, repaired);
  EXPECT_EQ(tool.title, repaired);
  EXPECT_EQ(tool.metadata.at("output"), json::value(repaired));
  EXPECT_TRUE(tool.metadata.contains(repaired));
  EXPECT_EQ(tool.input.at("command"), json::value(repaired));
  EXPECT_EQ((*back)->parts[1].text, repaired);
  ASSERT_TRUE((*back)->info.error);
  EXPECT_EQ((*back)->info.error->message, repaired);
}

// What a revert needs is kept byte for byte: file contents and names need not be text (a NUL
// byte, bytes that are not UTF-8), and held files come back in the order of their names' bytes.
TEST(SessionStore, FileChangesAndHeldFilesKeepTheirBytes) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  auto m = make_assistant(s);
  const std::string latin1 = "/p/caf\xe9.txt", binary("\x00\xff\x01 data", 8);
  StoreChanges changes;
  changes.add(MessageWithParts{m, {}});
  changes.files.push_back(FileChangeRow{s.id, m.id, "prt_1", latin1, std::nullopt, binary});
  changes.files.push_back(FileChangeRow{s.id, m.id, "prt_2", "/p/b.txt", "old", std::nullopt});
  auto written = store->write(changes);
  ASSERT_TRUE(written) << written.error().message;
  auto files = store->file_changes(s.id);
  ASSERT_TRUE(files) << files.error().message;
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, latin1);
  EXPECT_FALSE((*files)[0].before);
  EXPECT_EQ((*files)[0].after, binary);
  EXPECT_EQ((*files)[1].before, "old");
  EXPECT_FALSE((*files)[1].after);

  auto held = store->put_revert(
      s, {HeldFile{latin1, binary}, HeldFile{"/p/a", std::nullopt}, HeldFile{"/p/B", "x"}});
  ASSERT_TRUE(held) << held.error().message;
  auto back = store->held_files(s.id);
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].path, "/p/B");  // bytewise: 'B' < 'a' < 'c'
  EXPECT_EQ((*back)[1].path, "/p/a");
  EXPECT_FALSE((*back)[1].content);
  EXPECT_EQ((*back)[2].path, latin1);
  EXPECT_EQ((*back)[2].content, binary);
}

TEST(SessionStore, DeeplyNestedToolInputsAreReadBack) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  auto m = make_assistant(s);
  auto p = tool_part(m, ToolState::Status::Completed);
  json::value nested = json::object{{"leaf", true}};
  for (int i = 0; i < 127; ++i)
    nested = json::object{{"a", std::move(nested)}};
  p.state.input = nested.as_object();
  ASSERT_TRUE(store->put_message({m, {p}}));
  auto list = store->list_messages(s.id);
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].parts.at(0).state.input, p.state.input);
}

TEST(SessionStore, MessagesAreListedForTheirOwnSessionOnly) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  auto other = make_session("other", 2);
  ASSERT_TRUE(store->put_session(s));
  ASSERT_TRUE(store->put_session(other));
  auto first = make_assistant(s);
  auto empty = make_assistant(s);
  auto second = make_assistant(s);
  auto foreign = make_assistant(other);
  auto a1 = tool_part(first, ToolState::Status::Completed);
  auto a2 = tool_part(first, ToolState::Status::Error);
  auto b = tool_part(second, ToolState::Status::Completed);
  // Written out of order: they come back by id.
  ASSERT_TRUE(store->put_message({foreign, {tool_part(foreign, ToolState::Status::Completed)}}));
  ASSERT_TRUE(store->put_message({second, {b}}));
  ASSERT_TRUE(store->put_message({first, {a1, a2}}));
  ASSERT_TRUE(store->put_message({empty, {}}));

  auto list = store->list_messages(s.id);
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].info.id, first.id);
  EXPECT_EQ(part_ids(*list), (PartIds{{a1.id, a2.id}, {}, {b.id}}));
  EXPECT_FALSE(*store->get_message(s.id, foreign.id)) << "found under another session";
}

TEST(SessionStore, ALimitListsTheNewestMessagesOldestFirst) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto m = make_assistant(s);
    ids.push_back(m.id);
    ASSERT_TRUE(store->put_message({m, {tool_part(m, ToolState::Status::Completed)}}));
  }
  auto ids_of = [](const std::vector<MessageWithParts>& list) {
    std::vector<std::string> out;
    for (const auto& m : list)
      out.push_back(m.info.id);
    return out;
  };
  EXPECT_EQ(ids_of(*store->list_messages(s.id, 2)), (std::vector{ids[2], ids[3]}));
  EXPECT_EQ(ids_of(*store->list_messages(s.id, 0)), ids) << "0 is no limit";
  EXPECT_EQ(ids_of(*store->list_messages(s.id, 9)), ids);
}

TEST(SessionStore, DeleteMessageRemovesOneMessageOfItsSession) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  auto other = make_session("other", 2);
  ASSERT_TRUE(store->put_session(s));
  ASSERT_TRUE(store->put_session(other));
  auto first = make_assistant(s);
  auto second = make_assistant(s);
  ASSERT_TRUE(store->put_message({first, {tool_part(first, ToolState::Status::Completed)}}));
  ASSERT_TRUE(store->put_message({second, {}}));
  EXPECT_FALSE(*store->delete_message(other.id, first.id)) << "deleted under another session";
  EXPECT_TRUE(*store->delete_message(s.id, first.id));
  EXPECT_FALSE(*store->delete_message(s.id, first.id)) << "deleted twice";
  auto list = store->list_messages(s.id);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].info.id, second.id);
}

// A message of a session that does not exist breaks the foreign key: a write that holds one
// fails as a whole.
MessageWithParts orphan_message() {
  auto gone = make_session("gone", 1);
  auto m = make_assistant(gone);
  return {m, {tool_part(m, ToolState::Status::Running)}};
}

TEST(SessionStore, WriteStoresAllOrNothing) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  auto m = make_assistant(s);
  StoreChanges changes;
  s.title = "renamed";
  changes.session = s;
  changes.add({m, {tool_part(m, ToolState::Status::Running)}});
  ASSERT_TRUE(store->write(changes));
  EXPECT_EQ((*store->get_session(s.id))->title, "renamed");
  auto list = store->list_messages(s.id);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].parts.size(), 1u);

  StoreChanges broken;
  auto m2 = make_assistant(s);
  auto lost = s;
  lost.title = "never stored";
  broken.session = lost;
  broken.add({m2, {}});
  broken.add(orphan_message());
  EXPECT_FALSE(store->write(broken));
  // Sessions are read from memory after the first time: what a failed write carried is not.
  EXPECT_EQ((*store->get_session(s.id))->title, "renamed");
  EXPECT_FALSE(*store->get_message(s.id, m2.id));
  EXPECT_EQ(store->list_messages(s.id)->size(), 1u);
  // The store is still usable (the failed transaction was rolled back).
  ASSERT_TRUE(store->put_message({m2, {}}));
  EXPECT_EQ(store->list_messages(s.id)->size(), 2u);
}

// Several turns' changes (the service gathers those of concurrent sessions) in one transaction:
// all are stored in order, or, when one of them breaks, none.
TEST(SessionStore, ABatchOfSeveralTurnsChangesIsStoredAllOrNothing) {
  auto store = *open_store();
  auto a = make_session("a", 1), b = make_session("b", 2);
  StoreChanges first, second;
  first.session = a;
  auto ma = make_assistant(a);
  first.add({ma, {}});
  second.session = b;
  auto mb = make_assistant(b);
  auto running = tool_part(mb, ToolState::Status::Running);
  second.add({mb, {running}});
  // A later change of the same message in the same batch wins, as it would in two transactions.
  StoreChanges third;
  auto completed = running;
  completed.state.status = ToolState::Status::Completed;
  third.add({mb, {completed}});
  std::vector<const StoreChanges*> batch{&first, &second, &third};
  ASSERT_TRUE(store->write(batch));
  ASSERT_EQ(store->list_sessions()->size(), 2u);
  EXPECT_EQ(store->list_messages(a.id)->size(), 1u);
  auto stored = store->get_message(b.id, mb.id);
  ASSERT_TRUE(stored && *stored);
  ASSERT_EQ((*stored)->parts.size(), 1u);
  EXPECT_EQ((*stored)->parts[0].state.status, ToolState::Status::Completed);

  auto c = make_session("c", 3);
  StoreChanges good, broken;
  good.session = c;
  auto mc = make_assistant(b);
  broken.add({mc, {}});
  broken.add(orphan_message());
  std::vector<const StoreChanges*> failing{&good, &broken};
  EXPECT_FALSE(store->write(failing));
  EXPECT_FALSE(*store->get_session(c.id));  // the good one went with the broken one
  EXPECT_FALSE(*store->get_message(b.id, mc.id));
  // Alone, the good one is stored (the service retries a failed batch one turn at a time).
  ASSERT_TRUE(store->write(good));
  EXPECT_TRUE(*store->get_session(c.id));
}

TEST(SessionStore, SurvivesReopeningAndFailsInterruptedTurns) {
  TempDir dir;
  std::string session_id, message_id;
  {
    auto store = open_lasting(dir, true);
    ASSERT_TRUE(store) << store.error().message;
    auto s = make_session("kept", 1);
    session_id = s.id;
    ASSERT_TRUE((*store)->put_session(s));
    auto m = make_assistant(s);  // never completed: the server "crashed" mid-turn
    message_id = m.id;
    auto done = tool_part(m, ToolState::Status::Completed);
    done.state.output = "kept as it was";
    ASSERT_TRUE((*store)->put_message({m, {done, tool_part(m, ToolState::Status::Running)}}));
  }
  auto store = open_lasting(dir, false);
  ASSERT_TRUE(store) << store.error().message;
  auto sessions = (*store)->list_sessions();
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].title, "kept");

  auto failed = (*store)->fail_interrupted_turns("The server stopped during this turn");
  ASSERT_TRUE(failed) << failed.error().message;
  ASSERT_EQ(failed->size(), 1u);
  EXPECT_EQ((*failed)[0].id, message_id);
  auto msgs = *(*store)->list_messages(session_id);
  ASSERT_EQ(msgs.size(), 1u);
  ASSERT_TRUE(msgs[0].info.error.has_value());
  EXPECT_EQ(msgs[0].info.error->name, "MessageAbortedError");
  EXPECT_TRUE(msgs[0].info.completed.has_value());
  ASSERT_EQ(msgs[0].parts.size(), 2u);
  EXPECT_EQ(msgs[0].parts[0].state.status, ToolState::Status::Completed);
  EXPECT_EQ(msgs[0].parts[0].state.output, "kept as it was");
  EXPECT_EQ(msgs[0].parts[1].state.status, ToolState::Status::Error);
  EXPECT_EQ(msgs[0].parts[1].state.error, "The server stopped during this turn");
  // A second start finds nothing left to fail.
  EXPECT_TRUE((*store)->fail_interrupted_turns("x")->empty());
}

// Client calls that wait are stored with their turn's writes; a restart keeps the turns that go
// on (and their waits), fails the others and drops their waits; a session's delete takes them.
TEST(SessionStore, WaitsAreStoredUntilTheyEndOrTheirTurnFails) {
  TempDir dir;
  auto client = [](const SessionInfo& s, const MessageInfo& m, std::string id) {
    return Wait::of(clienttool::WaitingCall{id, "c1", "client_c1_t", s.id, m.id, "call_" + id, true,
                                            42, 1000, 1700000001000, 1700000060000});
  };
  auto s = make_session("s", 1), t = make_session("t", 2);
  auto kept = make_assistant(s), failed = make_assistant(t);
  permission::PermissionRequest ask{
      "per_b", s.id,    "bash",  {"ls", "pwd"}, json::object{{"command", "ls; pwd"}},
      {"ls"},  kept.id, "call_b"};
  {
    auto store = open_lasting(dir, true);
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE((*store)->put_session(s));
    ASSERT_TRUE((*store)->put_session(t));
    StoreChanges changes;
    changes.add({kept, {tool_part(kept, ToolState::Status::Running)}});
    changes.add({failed, {tool_part(failed, ToolState::Status::Running)}});
    changes.waits = {client(s, kept, "req_a"), client(s, kept, "req_b"), Wait::of(ask),
                     client(t, failed, "req_c")};
    ASSERT_TRUE((*store)->write(changes));
    StoreChanges ended;
    ended.waits_ended = {"req_b"};
    ASSERT_TRUE((*store)->write(ended));
  }
  auto store = open_lasting(dir, false);
  ASSERT_TRUE(store) << store.error().message;
  auto waits = (*store)->waits();
  ASSERT_TRUE(waits) << waits.error().message;
  ASSERT_EQ(waits->size(), 3u);  // by id: per_b, req_a, req_c
  EXPECT_EQ(to_json((*waits)[0]), to_json(Wait::of(ask)));
  ASSERT_TRUE((*waits)[0].ask);
  EXPECT_EQ((*waits)[0].call_id, "call_b");
  EXPECT_EQ((*waits)[0].message_id, kept.id);
  EXPECT_EQ(to_json((*waits)[1]), to_json(client(s, kept, "req_a")));
  EXPECT_EQ((*waits)[2].id, "req_c");
  auto open = (*store)->open_messages();
  ASSERT_TRUE(open);
  EXPECT_EQ(open->size(), 2u);

  auto ended = (*store)->fail_interrupted_turns("stopped", {kept.id}, {"req_a", "per_b"});
  ASSERT_TRUE(ended) << ended.error().message;
  ASSERT_EQ(ended->size(), 1u);
  EXPECT_EQ((*ended)[0].id, failed.id);
  open = (*store)->open_messages();
  ASSERT_EQ(open->size(), 1u);
  EXPECT_EQ((*open)[0].info.id, kept.id);
  EXPECT_EQ((*open)[0].parts[0].state.status, ToolState::Status::Running);
  waits = (*store)->waits();
  ASSERT_EQ(waits->size(), 2u);
  EXPECT_EQ((*waits)[1].id, "req_a");

  // What does not read back is refused, naming what is wrong.
  auto bad = wait_from_json(json::object{{"ask", json::object{{"id", "per_x"}}}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("sessionID"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(wait_from_json(json::object{}));

  ASSERT_TRUE((*store)->delete_session(s.id));
  EXPECT_TRUE((*store)->waits()->empty());
}

TEST(SessionStore, TodosAreKeptPerSessionAndDeletedWithIt) {
  auto store = *open_store();
  auto s = make_session("s", 1);
  ASSERT_TRUE(store->put_session(s));
  EXPECT_EQ(*store->get_todos(s.id), "") << "none yet";
  ASSERT_TRUE(store->put_todos(s.id, R"([{"id":"1"}])"));
  ASSERT_TRUE(store->put_todos(s.id, R"([{"id":"2"}])"));
  EXPECT_EQ(*store->get_todos(s.id), R"([{"id":"2"}])") << "a new list replaces the old";
  EXPECT_FALSE(store->put_todos("ses_missing", "[]")) << "only for a session that exists";
  ASSERT_TRUE(*store->delete_session(s.id));
  EXPECT_EQ(*store->get_todos(s.id), "");
}

// The rows that the migration tests write in an older schema, and what they must find after it.
struct OldRows {
  SessionInfo s = make_session("old", 5);
  MessageInfo done = completed(make_assistant(s));
  MessageInfo open = make_assistant(s);  // interrupted
  Part done_part = tool_part(done, ToolState::Status::Completed);
  Part done_later = tool_part(done, ToolState::Status::Error);
  Part open_part = tool_part(open, ToolState::Status::Running);

  static MessageInfo completed(MessageInfo m) {
    m.completed = 6;
    return m;
  }

  // Writes the rows into tables of an older schema (created by `schema`; the part table's key
  // columns are the same in every version).
  void write(const std::filesystem::path& dir, std::string_view schema, int version) const {
    auto db = store::SqliteDatabase::open(dir / "switchboard.db");
    ASSERT_TRUE(db) << db.error().message;
    ASSERT_TRUE((*db)->exec(schema));
    ASSERT_TRUE((*db)->exec("PRAGMA user_version = " + std::to_string(version)));
    auto put = [&](std::string_view sql, std::initializer_list<std::string> values) {
      auto st = (*db)->prepare(sql);
      ASSERT_TRUE(st);
      int i = 1;
      for (const auto& v : values)
        st->bind(i++, v);
      ASSERT_TRUE(st->run());
    };
    put("INSERT INTO session(id, updated, data) VALUES(?1, 5, ?2)",
        {s.id, json::serialize(to_json(s))});
    for (const auto* m : {&done, &open})
      put("INSERT INTO message(id, session_id, completed, data) VALUES(?1, ?2, ?3, ?4)",
          {m->id, s.id, m == &open ? "0" : "1", json::serialize(to_json(*m))});
    // Out of id order: a message's parts come back in id order all the same.
    for (const auto* p : {&done_later, &open_part, &done_part})
      put("INSERT INTO part(id, message_id, session_id, data) VALUES(?1, ?2, ?3, ?4)",
          {p->id, p->message_id, s.id, json::serialize(to_json(*p))});
  }

  // Opens the store on `dir` (which migrates it) and checks that every session, message and part
  // is there, that the interrupted turn is found, and that new writes work.
  void expect_migrated(const std::filesystem::path& dir) const {
    auto store = SessionStore::open(dir);
    ASSERT_TRUE(store) << store.error().message;
    auto messages = (*store)->list_messages(s.id);
    ASSERT_TRUE(messages) << messages.error().message;
    ASSERT_EQ(messages->size(), 2u);
    EXPECT_EQ((*messages)[0].info.id, done.id);
    ASSERT_EQ(part_ids(*messages), (PartIds{{done_part.id, done_later.id}, {open_part.id}}));
    EXPECT_EQ((*messages)[0].parts[1].state.status, ToolState::Status::Error);
    auto failed = (*store)->fail_interrupted_turns("stopped");
    ASSERT_TRUE(failed) << failed.error().message;
    ASSERT_EQ(failed->size(), 1u);
    EXPECT_EQ((*failed)[0].id, open.id);
    auto interrupted = (*store)->get_message(s.id, open.id);
    ASSERT_TRUE(interrupted && *interrupted);
    EXPECT_EQ((*interrupted)->parts[0].state.status, ToolState::Status::Error);
    // The migrated tables take new rows and upserts.
    auto again = (*messages)[0];
    again.parts.push_back(tool_part(done, ToolState::Status::Completed));
    ASSERT_TRUE((*store)->put_message(again));
    EXPECT_EQ((*(*store)->get_message(s.id, done.id))->parts.size(), 3u);
    EXPECT_EQ(*(*store)->delete_session(s.id), true);
    EXPECT_TRUE((*store)->list_messages(s.id)->empty());
    store->reset();
    // A second start finds the current version and changes nothing.
    auto reopened = SessionStore::open(dir);
    ASSERT_TRUE(reopened) << reopened.error().message;
    EXPECT_TRUE((*reopened)->list_sessions()->empty());
  }
};

// A data directory of the first release (schema without a version, each row keyed by its own
// id) is moved to the current schema at start.
TEST(SessionStore, ADatabaseOfTheFirstReleaseIsMigrated) {
  TempDir dir;
  OldRows rows;
  rows.write(dir.path(), R"sql(
    CREATE TABLE session (id TEXT PRIMARY KEY, updated INTEGER NOT NULL, data TEXT NOT NULL);
    CREATE TABLE message (
      id TEXT PRIMARY KEY,
      session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
      completed INTEGER NOT NULL DEFAULT 1,
      data TEXT NOT NULL);
    CREATE INDEX message_by_session ON message(session_id, id);
    CREATE INDEX message_open ON message(completed) WHERE completed = 0;
    CREATE TABLE part (
      id TEXT PRIMARY KEY,
      message_id TEXT NOT NULL REFERENCES message(id) ON DELETE CASCADE,
      session_id TEXT NOT NULL,
      data TEXT NOT NULL);
    CREATE INDEX part_by_message ON part(message_id, id);
    CREATE INDEX part_by_session ON part(session_id, message_id, id);)sql",
             0);
  rows.expect_migrated(dir.path());
}

// Schema version 2 (parts in a table of their own, keyed by session, message and id) moves to
// the current one at start: each message's parts go into its row.
TEST(SessionStore, ADatabaseOfSchemaVersion2IsMigrated) {
  TempDir dir;
  OldRows rows;
  rows.write(dir.path(), R"sql(
    CREATE TABLE session (id TEXT PRIMARY KEY, updated INTEGER NOT NULL, data TEXT NOT NULL);
    CREATE TABLE message (
      session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
      id TEXT NOT NULL,
      completed INTEGER NOT NULL DEFAULT 1,
      data TEXT NOT NULL,
      UNIQUE(session_id, id));
    CREATE INDEX message_open ON message(completed) WHERE completed = 0;
    CREATE TABLE part (
      session_id TEXT NOT NULL,
      message_id TEXT NOT NULL,
      id TEXT NOT NULL,
      data TEXT NOT NULL,
      UNIQUE(session_id, message_id, id),
      FOREIGN KEY(session_id, message_id) REFERENCES message(session_id, id) ON DELETE CASCADE);
    CREATE TABLE todo (
      session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
      data TEXT NOT NULL);)sql",
             2);
  rows.expect_migrated(dir.path());
}

// The database belongs to one connection: a second store on the same directory (another server)
// is refused while the first is open, and the directory is free again once the first is closed.
TEST(SessionStore, ASecondStoreOnTheSameDirectoryIsRefusedWhileTheFirstIsOpen) {
  TempDir dir;
  auto first = SessionStore::open(dir.path());
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE((*first)->put_session(make_session("kept", 1)));
  auto second = SessionStore::open(dir.path());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::Conflict) << second.error().message;
  EXPECT_NE(second.error().message.find("is in use by another process"), std::string::npos)
      << second.error().message;
  first->reset();
  auto reopened = SessionStore::open(dir.path());
  ASSERT_TRUE(reopened) << reopened.error().message;
  EXPECT_EQ((*reopened)->list_sessions()->size(), 1u);
}

// A database written by a newer version is refused rather than misread.
TEST(SessionStore, ANewerSchemaIsRefusedWithAClearError) {
  TempDir dir;
  {
    auto db = store::SqliteDatabase::open(dir.path() / "switchboard.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->exec("PRAGMA user_version = 99"));
  }
  auto store = SessionStore::open(dir.path());
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("newer Switchboard"), std::string::npos)
      << store.error().message;
}

// The same on PostgreSQL, whose version is in the table switchboard_schema; an older one (a
// schema without the tables added since) gets them.
TEST(SessionStorePostgres, ANewerSchemaIsRefusedAndAnOlderOneIsCompleted) {
  // ctest runs it in the PostgreSQL pass only (CMakeLists.txt); this is for a run by hand.
  if (!test::storage_is_postgres()) GTEST_SKIP() << "about the PostgreSQL store";
  TempDir dir;
  {
    auto store = open_lasting(dir, true);
    ASSERT_TRUE(store) << store.error().message;
  }
  auto url = test::postgres_schema_url(test::schema_name_for(test_name()), false);
  {
    auto db = store::PostgresDatabase::open({.url = url});
    ASSERT_TRUE(db) << db.error().message;
    ASSERT_TRUE((*db)->exec("DROP TABLE waiting_call; UPDATE switchboard_schema SET version = 2"));
  }
  {
    auto store = open_lasting(dir, false);
    ASSERT_TRUE(store) << store.error().message;
    auto s = make_session("s", 1);
    ASSERT_TRUE((*store)->put_session(s));
    EXPECT_TRUE((*store)->waits());  // the table is back
  }
  {
    auto db = store::PostgresDatabase::open({.url = url});
    ASSERT_TRUE(db) << db.error().message;
    auto st = (*db)->prepare("SELECT version FROM switchboard_schema");
    ASSERT_TRUE(st);
    ASSERT_TRUE(*st->step());
    EXPECT_EQ(st->integer(0), 3);
    ASSERT_TRUE((*db)->exec("UPDATE switchboard_schema SET version = 99"));
  }
  auto store = open_lasting(dir, false);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("newer Switchboard"), std::string::npos)
      << store.error().message;
}

// Two nodes of a cluster on one store. Node a's connection breaks (a PostgreSQL restart) while its
// turn holds session s; node b claims s meanwhile. a's next write of that turn is refused
// (nothing of it stored over b's), a learns the claim is lost, and its turn on a session it still
// holds is stored as before.
TEST(SessionStorePostgres, ATurnsWriteIsRefusedOnceAnotherNodeTookItsClaim) {
  if (!test::storage_is_postgres()) GTEST_SKIP() << "about the PostgreSQL store";
  auto url = test::postgres_schema_url(test::schema_name_for(test_name()), true);
  auto open_node = [&](const std::string& id) -> std::shared_ptr<store::Database> {
    auto db = store::PostgresDatabase::open({.url = url, .node_id = id});
    EXPECT_TRUE(db) << db.error().message;
    return db ? std::shared_ptr<store::Database>(std::move(*db)) : nullptr;
  };
  auto a_db = open_node("a");
  auto b_db = open_node("b");
  ASSERT_TRUE(a_db && b_db);
  auto a = SessionStore::open(a_db);
  auto b = SessionStore::open(b_db);
  ASSERT_TRUE(a && b);
  (*a)->set_shared(true);
  (*b)->set_shared(true);
  auto s = make_session("s", 1), kept = make_session("kept", 2), freed = make_session("freed", 3);
  ASSERT_TRUE((*a)->put_session(s));
  ASSERT_TRUE((*a)->put_session(kept));
  ASSERT_TRUE((*a)->put_session(freed));
  ASSERT_TRUE(*(*a)->claim(s.id));
  ASSERT_TRUE(*(*a)->claim(kept.id));
  ASSERT_TRUE(*(*a)->claim(freed.id));
  EXPECT_FALSE(*(*b)->claim(s.id));

  std::string pid;
  {
    std::lock_guard lock(a_db->mutex());
    auto st = a_db->prepare("SELECT pg_backend_pid()");
    ASSERT_TRUE(st && *st->step());
    pid = std::to_string(st->integer(0));
  }
  test::postgres_query(*test::test_postgres_url(), "SELECT pg_terminate_backend(" + pid + ")");
  // Free once a's server process has ended (pg_terminate_backend does not wait for it).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool taken = false;
  while (!(taken = *(*b)->claim(s.id)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(taken);
  // b runs a turn of `freed` and gives it up again before a comes back: free, but not a's.
  ASSERT_TRUE(*(*b)->claim(freed.id));
  auto b_freed_turn = make_assistant(freed);
  StoreChanges of_b_freed;
  of_b_freed.claimed_session = freed.id;
  of_b_freed.add({b_freed_turn, {}});
  ASSERT_TRUE((*b)->write(of_b_freed));
  (*b)->release(freed.id);
  auto b_turn = make_assistant(s);
  StoreChanges of_b;
  of_b.claimed_session = s.id;
  of_b.add({b_turn, {}});
  ASSERT_TRUE((*b)->write(of_b));

  auto a_turn = make_assistant(s);
  StoreChanges late;
  late.claimed_session = s.id;
  auto renamed = s;
  renamed.title = "a's late copy";
  late.session = renamed;
  late.add({a_turn, {}});
  // The first statement finds the broken connection; a new one is made in the background (the
  // writes meanwhile fail as unavailable), and the first write on it is refused.
  auto first = (*a)->write(late);
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code, ErrorCode::Unavailable) << first.error().message;
  auto refused = (*a)->write(late);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       !refused && refused.error().code == ErrorCode::Unavailable &&
       std::chrono::steady_clock::now() < until;
       refused = (*a)->write(late))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Conflict) << refused.error().message;
  EXPECT_NE(refused.error().message.find("no longer holds"), std::string::npos)
      << refused.error().message;
  auto lost = (*a)->lost_claims();
  std::sort(lost.begin(), lost.end());
  std::vector<std::string> expected{freed.id, s.id};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(lost, expected);
  EXPECT_TRUE((*a)->lost_claims().empty());
  StoreChanges late_freed;
  late_freed.claimed_session = freed.id;
  late_freed.add({make_assistant(freed), {}});
  auto refused_freed = (*a)->write(late_freed);
  ASSERT_FALSE(refused_freed);
  EXPECT_EQ(refused_freed.error().code, ErrorCode::Conflict) << refused_freed.error().message;
  EXPECT_TRUE(*(*b)->claim(freed.id));  // a did not keep it
  // A todowrite of a's old turn too.
  auto todos = (*a)->put_todos(s.id, "[]");
  ASSERT_FALSE(todos);
  EXPECT_EQ(todos.error().code, ErrorCode::Conflict) << todos.error().message;
  EXPECT_TRUE((*a)->put_todos(kept.id, "[]"));
  EXPECT_EQ((*b)->get_session(s.id)->value().title, "s");
  EXPECT_FALSE(*(*b)->get_message(s.id, a_turn.id));
  EXPECT_TRUE(*(*b)->get_message(s.id, b_turn.id));

  StoreChanges still_mine;
  still_mine.claimed_session = kept.id;
  auto kept_turn = make_assistant(kept);
  still_mine.add({kept_turn, {}});
  EXPECT_TRUE((*a)->write(still_mine));
  EXPECT_FALSE(*(*b)->claim(kept.id));  // a took it again when it connected again
}

// What stock SQLite finds in a copy of the store's files taken while the store has them open:
// what a crash (kill -9) would leave. The copy's table `t`: rows, total text bytes, largest id,
// and whether PRAGMA integrity_check passes.
struct Recovered {
  std::int64_t rows = -1, bytes = -1, max_id = -1;
  bool intact = false;
};

Recovered recover_copy(const std::filesystem::path& dir, const std::string& copy_name) {
  auto db = dir / "a.db", copy = dir / (copy_name + ".db");
  std::filesystem::copy_file(db, copy);
  if (std::filesystem::exists(dir / "a.db-wal"))
    std::filesystem::copy_file(dir / "a.db-wal", dir / (copy_name + ".db-wal"));
  Recovered out;
  sqlite3* conn = nullptr;
  EXPECT_EQ(sqlite3_open_v2(copy.c_str(), &conn, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(conn, "SELECT count(*), coalesce(sum(length(text)), 0), max(id) FROM t",
                         -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    out.rows = sqlite3_column_int64(st, 0);
    out.bytes = sqlite3_column_int64(st, 1);
    out.max_id = sqlite3_column_int64(st, 2);
  }
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(conn, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    out.intact =
        std::string_view(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "ok";
  sqlite3_finalize(st);
  sqlite3_close(conn);
  return out;
}

std::unique_ptr<store::SqliteDatabase> open_table_t(const TempDir& dir) {
  auto opened = store::SqliteDatabase::open(dir.path() / "a.db");
  EXPECT_TRUE(opened) << opened.error().message;
  if (!opened) return nullptr;
  EXPECT_TRUE((*opened)->exec("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT NOT NULL)"));
  return std::move(*opened);
}

void insert_row(store::Database& db, std::int64_t id, const std::string& text) {
  auto st = db.prepare("INSERT INTO t(id, text) VALUES(?1, ?2)");
  ASSERT_TRUE(st);
  st->bind(1, id).bind(2, text);
  ASSERT_TRUE(st->run());
}

// The files a crash (kill -9) leaves behind an open store, in exclusive locking mode with its WAL
// index in memory (no -shm file), must be a database and WAL that a fresh connection recovers:
// every committed transaction there, nothing else.
TEST(StoreFiles, WhatACrashLeavesIsRecoveredByStockSqlite) {
  TempDir dir;
  auto db = open_table_t(dir);
  ASSERT_TRUE(db);
  constexpr int kRows = 60;
  for (int i = 0; i < kRows; ++i) {
    store::Database::Transaction tx(*db);
    insert_row(*db, i, std::string(100 + i * 97, static_cast<char>('a' + i % 26)));
    ASSERT_TRUE(tx.commit());
  }
  // One transaction larger than a tiny page cache: SQLite spills pages to the WAL before the
  // commit and rewrites frame checksums.
  ASSERT_TRUE(db->exec("PRAGMA cache_size=5"));
  constexpr int kSpilled = 200;
  {
    store::Database::Transaction tx(*db);
    for (int i = 0; i < kSpilled; ++i)
      insert_row(*db, kRows + i, std::string(3000, 'z'));
    ASSERT_TRUE(db->exec("UPDATE t SET text = text || 'y' WHERE id < 5"));
    ASSERT_TRUE(tx.commit());
  }
  // A transaction that never committed must not come back.
  {
    store::Database::Transaction tx(*db);
    ASSERT_TRUE(db->exec("INSERT INTO t(id, text) VALUES(1000, 'uncommitted')"));
  }

  auto wal_bytes = std::filesystem::file_size(dir.path() / "a.db-wal");
  ASSERT_GT(wal_bytes, 32u);
  EXPECT_EQ((wal_bytes - 32) % (24 + 4096), 0u) << "whole frames of 24 + 4096 bytes";
  auto got = recover_copy(dir.path(), "b");
  std::int64_t expected_bytes = std::int64_t{kSpilled} * 3000 + 5;
  for (int i = 0; i < kRows; ++i)
    expected_bytes += 100 + i * 97;
  EXPECT_EQ(got.rows, kRows + kSpilled);
  EXPECT_EQ(got.bytes, expected_bytes);
  EXPECT_EQ(got.max_id, kRows + kSpilled - 1);
  EXPECT_TRUE(got.intact);
}

// Writes beyond `limit` bytes into any file fail (EFBIG, as a full disk fails them) while this
// lives.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit l = old_;
    l.rlim_cur = limit;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

std::optional<std::string> text_of_row(store::Database& db, std::int64_t id) {
  auto st = db.prepare("SELECT text FROM t WHERE id = ?1");
  if (!st) return std::nullopt;
  st->bind(1, id);
  auto row = st->step();
  if (!row || !*row) return std::nullopt;
  return st->text(0);
}

// A commit whose WAL write fails (a full disk) is reported as failed. As with stock SQLite, what
// it wrote must then not be what the store reads back, nor what it later stores; and reads that
// need no write (a lookup that finds nothing) keep working while the disk is full.
TEST(StoreFiles, ACommitThatFailsToWriteIsNeitherReadBackNorStoredLater) {
  TempDir dir;
  auto db = open_table_t(dir);
  ASSERT_TRUE(db);
  insert_row(*db, 1, "first");
  auto wal_bytes = std::filesystem::file_size(dir.path() / "a.db-wal");
  Result<void> committed;
  bool lookup_ok = false;
  std::optional<std::string> read_back;
  {
    FileSizeLimit full(wal_bytes);
    {
      store::Database::Transaction tx(*db);
      insert_row(*db, 2, "reported as not stored");
      committed = tx.commit();
    }
    // A lookup of a missing row (its statement ends without a row).
    auto st = db->prepare("SELECT text FROM t WHERE id = ?1");
    ASSERT_TRUE(st);
    st->bind(1, std::int64_t{999});
    auto row = st->step();
    lookup_ok = row.has_value();
    if (!row) ADD_FAILURE() << "a read while the disk is full: " << row.error().message;
  }
  read_back = text_of_row(*db, 2);
  EXPECT_FALSE(committed) << "the commit could not be written";
  EXPECT_TRUE(lookup_ok);
  EXPECT_FALSE(read_back) << "row 2 reads back as \"" << read_back.value_or("") << "\"";
  // A checkpoint syncs the WAL: nothing of the failed commit may reach the file then either (a
  // copy with its commit frame would bring row 2 back).
  ASSERT_TRUE(db->exec("PRAGMA wal_checkpoint(PASSIVE)"));
  auto after_checkpoint = recover_copy(dir.path(), "checkpointed");
  EXPECT_EQ(after_checkpoint.rows, 1);
  EXPECT_TRUE(after_checkpoint.intact);
  insert_row(*db, 3, "after the disk has room again");
  auto got = recover_copy(dir.path(), "after");
  EXPECT_EQ(got.rows, 2) << "rows 1 and 3; row 2's commit was reported failed";
  EXPECT_TRUE(got.intact);
}

}  // namespace
}  // namespace sb::session
