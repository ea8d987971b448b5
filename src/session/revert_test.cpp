// Reverting a session's files (session/revert.hpp) and the store's tables behind it
// (store_files.cpp): the points OpenCode takes, files put back and taken back in a temporary
// directory, a revert found again after reopening the store, a revert made final.
#include "session/revert.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "store/sqlite.hpp"
#include "tool/tool_test_helpers.hpp"
#include "util/ids.hpp"

namespace sb::session {
namespace {

namespace fs = std::filesystem;
using sb::tool::testing::TempDir;

MessageWithParts message(const SessionInfo& s, MessageInfo::Role role) {
  MessageWithParts m;
  m.info.id = ids::make("msg");
  m.info.session_id = s.id;
  m.info.role = role;
  m.info.created = now_ms();
  return m;
}

Part& add_part(MessageWithParts& m, Part::Type type) {
  Part p;
  p.id = ids::make("prt");
  p.session_id = m.info.session_id;
  p.message_id = m.info.id;
  p.type = type;
  m.parts.push_back(p);
  return m.parts.back();
}

std::optional<std::string> file(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A session of two turns in a temporary project: turn 1 creates a.txt and edits b.txt; turn 2
// edits a.txt and creates c.txt. Each change is written to disk and to the store as a turn would.
struct TwoTurns : ::testing::Test {
  TempDir dir{"sb_revert_test"};
  std::shared_ptr<SessionStore> store{std::move(*SessionStore::open_memory())};
  std::shared_ptr<bus::EventBus> bus = bus::EventBus::create();
  std::vector<std::string> events;
  bus::Subscription sub =
      bus->subscribe([this](const bus::EventPtr& e) { events.push_back(e->type); });
  SessionInfo session;
  std::vector<MessageWithParts> messages;

  fs::path path(const std::string& name) const { return dir.path() / name; }

  void change(MessageWithParts& m, const std::string& name, std::optional<std::string> after) {
    Part& tool = add_part(m, Part::Type::Tool);
    StoreChanges changes;
    changes.files.push_back(FileChangeRow{session.id, m.info.id, tool.id, path(name).string(),
                                          file(path(name)), after});
    ASSERT_TRUE(put_file(path(name).string(), after));
    ASSERT_TRUE(store->write(changes));
  }

  void SetUp() override {
    session.id = ids::make("ses");
    session.directory = dir.str();
    ASSERT_TRUE(store->put_session(session));
    dir.write("b.txt", "b0\n");
    auto u1 = message(session, MessageInfo::Role::User);
    add_part(u1, Part::Type::Text);
    auto a1 = message(session, MessageInfo::Role::Assistant);
    add_part(a1, Part::Type::Text);
    change(a1, "a.txt", "a1\n");
    change(a1, "b.txt", "b1\n");
    auto u2 = message(session, MessageInfo::Role::User);
    add_part(u2, Part::Type::Text);
    auto a2 = message(session, MessageInfo::Role::Assistant);
    change(a2, "a.txt", "a2\n");
    change(a2, "c.txt", "c2\n");
    messages = {u1, a1, u2, a2};
    for (const auto& m : messages)
      ASSERT_TRUE(store->put_message(m));
  }

  SessionInfo revert_to(const std::string& message_id, const std::string& part_id = "") {
    auto point = revert_point(messages, message_id, part_id);
    EXPECT_TRUE(point) << point.error().message;
    auto s = revert_files(*store, *bus, session, *point);
    EXPECT_TRUE(s) << s.error().message;
    session = *s;
    return session;
  }
};

TEST_F(TwoTurns, ThePointIsTheTurnsUserMessageUnlessAPartFollowsWhatWasSaid) {
  const auto& [u1, a1, u2, a2] = std::tie(messages[0], messages[1], messages[2], messages[3]);
  EXPECT_EQ(revert_point(messages, u2.info.id, "")->message_id, u2.info.id);
  // An assistant message goes with its question.
  EXPECT_EQ(revert_point(messages, a2.info.id, "")->message_id, u2.info.id);
  // a1's second tool part follows its text: the point is that part.
  auto point = revert_point(messages, a1.info.id, a1.parts[2].id);
  EXPECT_EQ(point->message_id, a1.info.id);
  EXPECT_EQ(point->part_id, a1.parts[2].id);
  // u1's first part follows nothing said: the whole turn.
  point = revert_point(messages, u1.info.id, u1.parts[0].id);
  EXPECT_EQ(point->message_id, u1.info.id);
  EXPECT_EQ(point->part_id, "");
  EXPECT_EQ(revert_point(messages, "msg_nope", "").error().code, ErrorCode::NotFound);
  // A part of another message is not found in this one.
  EXPECT_EQ(revert_point(messages, u1.info.id, a1.parts[0].id).error().code, ErrorCode::NotFound);
}

TEST_F(TwoTurns, RevertPutsTheFilesBackAndUnrevertTakesThemBack) {
  auto s = revert_to(messages[2].info.id);
  ASSERT_TRUE(s.revert);
  EXPECT_EQ(s.revert->message_id, messages[2].info.id);
  EXPECT_NE(s.revert->diff.find("-a2"), std::string::npos);
  EXPECT_EQ(file(path("a.txt")), "a1\n");
  EXPECT_EQ(file(path("b.txt")), "b1\n");
  EXPECT_EQ(file(path("c.txt")), std::nullopt);  // created by turn 2: removed
  EXPECT_EQ(std::count(events.begin(), events.end(), "file.edited"), 2);
  EXPECT_EQ(events.back(), "session.updated");
  // The messages stay.
  EXPECT_EQ(store->list_messages(session.id)->size(), 4u);
  // Stored: the revert is found again by a new read of the session.
  EXPECT_TRUE((*store->get_session(session.id))->revert);

  auto back = unrevert_files(*store, *bus, session);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_FALSE(back->revert);
  EXPECT_EQ(file(path("a.txt")), "a2\n");
  EXPECT_EQ(file(path("c.txt")), "c2\n");
  EXPECT_TRUE(store->held_files(session.id)->empty());
  // Nothing reverted: unrevert changes nothing.
  events.clear();
  auto again = unrevert_files(*store, *bus, *back);
  ASSERT_TRUE(again);
  EXPECT_TRUE(events.empty());
}

TEST_F(TwoTurns, ASecondRevertMovesThePointAndUnrevertGoesBackToBeforeTheFirst) {
  revert_to(messages[2].info.id);
  // Further back: b.txt and a.txt go back to before turn 1.
  revert_to(messages[0].info.id);
  EXPECT_EQ(file(path("a.txt")), std::nullopt);
  EXPECT_EQ(file(path("b.txt")), "b0\n");
  // Forward again (a redo of turn 1): the files turn 1 made come back.
  revert_to(messages[2].info.id);
  EXPECT_EQ(file(path("a.txt")), "a1\n");
  EXPECT_EQ(file(path("b.txt")), "b1\n");
  EXPECT_EQ(file(path("c.txt")), std::nullopt);
  ASSERT_TRUE(unrevert_files(*store, *bus, session));
  EXPECT_EQ(file(path("a.txt")), "a2\n");
  EXPECT_EQ(file(path("b.txt")), "b1\n");
  EXPECT_EQ(file(path("c.txt")), "c2\n");
}

TEST_F(TwoTurns, ARevertToAPartLeavesTheChangesBeforeIt) {
  revert_to(messages[1].info.id, messages[1].parts[2].id);  // a1's edit of b.txt
  EXPECT_EQ(file(path("a.txt")), "a1\n");
  EXPECT_EQ(file(path("b.txt")), "b0\n");
  EXPECT_EQ(file(path("c.txt")), std::nullopt);
  // Made final: a1 keeps its parts before the point, later messages go, with their changes.
  auto s = commit_revert(*store, *bus, session, messages);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_FALSE(s->revert);
  auto left = store->list_messages(session.id);
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ((*left)[1].parts.size(), 2u);
  auto changes = store->file_changes(session.id);
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].path, path("a.txt").string());
  EXPECT_EQ(std::count(events.begin(), events.end(), "message.removed"), 2);
  EXPECT_EQ(std::count(events.begin(), events.end(), "message.part.removed"), 1);
  // The files stay as reverted.
  EXPECT_EQ(file(path("b.txt")), "b0\n");
}

TEST_F(TwoTurns, ARevertMadeFinalDeletesTheTurnsFromThePoint) {
  revert_to(messages[2].info.id);
  auto s = commit_revert(*store, *bus, session, messages);
  ASSERT_TRUE(s);
  auto left = store->list_messages(session.id);
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ(store->file_changes(session.id)->size(), 2u);
  EXPECT_TRUE(store->held_files(session.id)->empty());
  EXPECT_FALSE((*store->get_session(session.id))->revert);
  EXPECT_EQ(file(path("a.txt")), "a1\n");
}

TEST_F(TwoTurns, ADiffShowsATurnsChangesOrTheWholeSessions) {
  auto turn2 = session_diff(*store, session, messages, messages[3].info.id);
  ASSERT_TRUE(turn2) << turn2.error().message;
  ASSERT_EQ(turn2->size(), 2u);
  const auto& a = (*turn2)[0].as_object();
  EXPECT_EQ(a.at("file").as_string(), "a.txt");
  EXPECT_EQ(a.at("status").as_string(), "modified");
  EXPECT_EQ(a.at("additions").to_number<int>(), 1);
  EXPECT_EQ(a.at("deletions").to_number<int>(), 1);
  EXPECT_NE(a.at("patch").as_string().find("+a2"), std::string::npos);
  EXPECT_EQ((*turn2)[1].as_object().at("status").as_string(), "added");
  auto all = session_diff(*store, session, messages, "");
  ASSERT_EQ(all->size(), 3u);  // a.txt (added, a2), b.txt, c.txt
  EXPECT_EQ((*all)[0].as_object().at("status").as_string(), "added");
  // A reverted session's whole diff leaves out what is undone.
  revert_to(messages[2].info.id);
  EXPECT_EQ(session_diff(*store, session, messages, "")->size(), 2u);
  EXPECT_EQ(session_diff(*store, session, messages, "msg_nope").error().code, ErrorCode::NotFound);
}

// A revert that cannot write a file (its directory is a regular file now, which stops root too)
// puts back what it wrote and the session's revert state: the session is as before the request.
TEST_F(TwoTurns, ARevertThatFailsMidwayLeavesTheFilesAndTheRevertAsTheyWere) {
  fs::create_directories(path("z"));
  dir.write("z/f.txt", "f1\n");
  change(messages[3], "z/f.txt", "f2\n");  // turn 2 edits z/f.txt, after a.txt and c.txt
  auto break_z = [&] {
    fs::remove_all(path("z"));
    dir.write("z", "not a directory\n");
  };
  auto held_paths = [&] {
    std::vector<std::string> out;
    for (const auto& h : *store->held_files(session.id))
      out.push_back(h.path + "=" + h.content.value_or("(none)"));
    return out;
  };

  // Not reverted before: not reverted after, nothing held, the files as turn 2 left them.
  break_z();
  auto point = revert_point(messages, messages[2].info.id, "");
  ASSERT_TRUE(point);
  auto failed = revert_files(*store, *bus, session, *point);
  ASSERT_FALSE(failed);
  EXPECT_EQ(file(path("a.txt")), "a2\n");
  EXPECT_EQ(file(path("b.txt")), "b1\n");
  EXPECT_EQ(file(path("c.txt")), "c2\n");  // removed, then put back
  EXPECT_FALSE((*store->get_session(session.id))->revert);
  EXPECT_TRUE(store->held_files(session.id)->empty());

  // Reverted before: the first revert stays, with what it held.
  fs::remove(path("z"));
  dir.write("z/f.txt", "f2\n");
  revert_to(messages[2].info.id);
  EXPECT_EQ(file(path("z/f.txt")), "f1\n");
  auto held_before = held_paths();
  break_z();
  point = revert_point(messages, messages[0].info.id, "");
  ASSERT_TRUE(point);
  failed = revert_files(*store, *bus, session, *point);
  ASSERT_FALSE(failed);
  EXPECT_EQ(file(path("a.txt")), "a1\n");
  EXPECT_EQ(file(path("b.txt")), "b1\n");
  EXPECT_EQ(file(path("c.txt")), std::nullopt);
  auto stored = *store->get_session(session.id);
  ASSERT_TRUE(stored->revert);
  EXPECT_EQ(stored->revert->message_id, messages[2].info.id);
  EXPECT_EQ(held_paths(), held_before);
}

// A recorded file that is a symbolic link now (here to a file out of the project): the revert is
// refused naming it, nothing is read or written through the link, and nothing is stored.
TEST_F(TwoTurns, ARevertRefusesAFileThatIsASymbolicLinkNow) {
  TempDir outside{"sb_revert_outside"};
  outside.write("secret.txt", "outside\n");
  fs::remove(path("a.txt"));
  fs::create_symlink(outside.path() / "secret.txt", path("a.txt"));
  auto point = revert_point(messages, messages[2].info.id, "");
  ASSERT_TRUE(point);
  auto refused = revert_files(*store, *bus, session, *point);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Conflict);
  EXPECT_NE(refused.error().message.find(path("a.txt").string()), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(file(outside.path() / "secret.txt"), "outside\n");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("a.txt"))));
  EXPECT_EQ(file(path("c.txt")), "c2\n");
  EXPECT_FALSE((*store->get_session(session.id))->revert);
  EXPECT_TRUE(store->held_files(session.id)->empty());

  // Nor does unrevert write through a link that took a held file's place.
  fs::remove(path("a.txt"));
  dir.write("a.txt", "a2\n");
  revert_to(messages[2].info.id);
  fs::remove(path("a.txt"));
  fs::create_symlink(outside.path() / "secret.txt", path("a.txt"));
  auto back = unrevert_files(*store, *bus, session);
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().code, ErrorCode::Conflict);
  EXPECT_EQ(file(outside.path() / "secret.txt"), "outside\n");
  EXPECT_TRUE((*store->get_session(session.id))->revert);
}

TEST(RevertStore, ARevertIsFoundAgainAfterReopeningAndDeletedWithItsSession) {
  TempDir dir{"sb_revert_store"};
  SessionInfo s;
  s.id = ids::make("ses");
  {
    auto store = SessionStore::open(dir.path());
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE((*store)->put_session(s));
    StoreChanges changes;
    changes.files.push_back({s.id, "msg_1", "prt_1", "/x", std::nullopt, std::string("x\0y", 3)});
    changes.files.push_back({s.id, "msg_1", "prt_2", "/x", std::string("x\0y", 3), ""});
    ASSERT_TRUE((*store)->write(changes));
    s.revert = SessionInfo::Revert{"msg_1", "", "diff"};
    ASSERT_TRUE((*store)->put_revert(s, {{"/x", std::nullopt}, {"/y", "held"}}));
  }
  auto store = SessionStore::open(dir.path());
  ASSERT_TRUE(store);
  auto again = (*store)->get_session(s.id);
  ASSERT_TRUE(again && *again && (*again)->revert);
  EXPECT_EQ((*again)->revert->message_id, "msg_1");
  auto changes = (*store)->file_changes(s.id);
  ASSERT_EQ(changes->size(), 2u);
  EXPECT_EQ((*changes)[0].before, std::nullopt);
  EXPECT_EQ((*changes)[0].after, std::string("x\0y", 3));  // bytes as they were
  EXPECT_EQ((*changes)[1].after, "");                      // empty is not absent
  auto held = (*store)->held_files(s.id);
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].content, std::nullopt);
  EXPECT_EQ((*held)[1].content, "held");
  ASSERT_TRUE((*store)->delete_session(s.id));
  EXPECT_TRUE((*store)->file_changes(s.id)->empty());
  EXPECT_TRUE((*store)->held_files(s.id)->empty());
}

TEST(RevertStore, AVersion3DatabaseWithoutTheTablesGetsThem) {
  TempDir dir{"sb_revert_store"};
  {
    auto db = store::SqliteDatabase::open(dir.path() / "switchboard.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->exec(
        "CREATE TABLE session (id TEXT PRIMARY KEY, updated INTEGER NOT NULL, data TEXT NOT "
        "NULL); PRAGMA user_version = 3"));
  }
  auto store = SessionStore::open(dir.path());
  ASSERT_TRUE(store) << store.error().message;
  SessionInfo s;
  s.id = ids::make("ses");
  ASSERT_TRUE((*store)->put_session(s));
  StoreChanges changes;
  changes.files.push_back({s.id, "msg_1", "prt_1", "/x", std::nullopt, "x"});
  ASSERT_TRUE((*store)->write(changes));
  EXPECT_EQ((*store)->file_changes(s.id)->size(), 1u);
}

}  // namespace
}  // namespace sb::session
