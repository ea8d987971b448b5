// store::PostgresDatabase against the PostgreSQL the test command starts (the CTest fixture
// `postgres`): values come back as they went in (bytes that are not text included), numbered
// parameters, transactions, one server per schema, and a connection that breaks — the statement
// fails with Unavailable and the next one connects again, but never in the middle of a
// transaction.
#include "store/postgres.hpp"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "test_postgres.hpp"

namespace sb::store {
namespace {

std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

// A fresh schema for this test. Without the fixture (a plain run of this binary; ctest runs
// these tests only with it, as pg.Postgres.*) they are skipped.
std::optional<std::string> schema_url() {
  if (!test::storage_is_postgres()) return std::nullopt;
  return test::postgres_schema_url(test::schema_name_for(test_name()), true);
}

#define SKIP_WITHOUT_POSTGRES(url)                                           \
  auto url = schema_url();                                                   \
  if (!url)                                                                  \
  GTEST_SKIP() << "no PostgreSQL fixture ($SWITCHBOARD_TEST_POSTGRES): run " \
                  "through ctest"

std::unique_ptr<PostgresDatabase> open_ok(const std::string& url) {
  auto db = PostgresDatabase::open({.url = url});
  EXPECT_TRUE(db) << db.error().message;
  return db ? std::move(*db) : nullptr;
}

// A store with the table that `ddl` creates.
std::unique_ptr<PostgresDatabase> open_with_table(const std::string& url, const char* ddl) {
  auto db = open_ok(url);
  if (!db) return nullptr;
  auto made = db->exec(ddl);
  EXPECT_TRUE(made) << made.error().message;
  return made ? std::move(db) : nullptr;
}

std::int64_t count_rows(Database& db, std::string_view table) {
  auto st = db.prepare("SELECT count(*) FROM " + std::string(table));
  EXPECT_TRUE(st);
  auto row = st->step();
  EXPECT_TRUE(row && *row) << (row ? "" : row.error().message);
  return st->integer(0);
}

// Whether `done` came true within 5 s (tried every 10 ms).
bool eventually(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Ends the connection from the server's side, as a restart of PostgreSQL does.
void terminate_backend_of(Database& db) {
  auto st = db.prepare("SELECT pg_backend_pid()");
  ASSERT_TRUE(st);
  auto row = st->step();
  ASSERT_TRUE(row && *row);
  auto pid = st->integer(0);
  PGconn* other = PQconnectdb(test::test_postgres_url()->c_str());
  ASSERT_EQ(PQstatus(other), CONNECTION_OK);
  PGresult* res =
      PQexec(other, ("SELECT pg_terminate_backend(" + std::to_string(pid) + ")").c_str());
  EXPECT_EQ(PQresultStatus(res), PGRES_TUPLES_OK) << PQresultErrorMessage(res);
  PQclear(res);
  PQfinish(other);
}

TEST(Postgres, ValuesComeBackAsTheyWentIn) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_ok(*url);
  ASSERT_TRUE(db);
  EXPECT_EQ(db->engine(), Engine::Postgres);
  ASSERT_TRUE(db->exec("CREATE TABLE t (id BIGINT PRIMARY KEY, name TEXT, body BYTEA, n INTEGER)"));
  // File contents need not be text: NUL bytes and bytes that are not UTF-8.
  const std::string bytes("a\0b\xff\xfe\x80z", 7);
  {
    auto st = db->prepare("INSERT INTO t(id, name, body, n) VALUES(?1, ?2, ?3, ?4)");
    ASSERT_TRUE(st);
    st->bind(1, std::int64_t{-9000000000}).bind(2, "zoë 'quoted' ?1").bind_blob(3, bytes);
    st->bind(4, std::int64_t{-7});
    auto r = st->run();
    ASSERT_TRUE(r) << r.error().message;
  }
  {
    auto st = db->prepare("INSERT INTO t(id, name, body, n) VALUES(?1, ?2, ?3, ?4)");
    ASSERT_TRUE(st);
    st->bind(1, std::int64_t{2}).bind_null(2).bind_null(3).bind(4, std::int64_t{1});
    ASSERT_TRUE(st->run());
  }
  auto st =
      db->prepare("SELECT id, name, body, n, n > 0 FROM t WHERE id < ?1 OR id = ?1 ORDER BY id");
  ASSERT_TRUE(st);
  st->bind(1, std::int64_t{2});
  auto row = st->step();
  ASSERT_TRUE(row && *row) << (row ? "no row" : row.error().message);
  EXPECT_EQ(st->integer(0), -9000000000);
  EXPECT_EQ(st->text(1), "zoë 'quoted' ?1");
  EXPECT_EQ(st->text(2), bytes);
  EXPECT_EQ(st->integer(3), -7);
  EXPECT_EQ(st->integer(4), 0);
  row = st->step();
  ASSERT_TRUE(row && *row);
  EXPECT_EQ(st->integer(0), 2);
  EXPECT_TRUE(st->is_null(1));
  EXPECT_TRUE(st->is_null(2));
  EXPECT_FALSE(st->is_null(3));
  EXPECT_EQ(st->integer(4), 1);
  row = st->step();
  ASSERT_TRUE(row);
  EXPECT_FALSE(*row);

  // Text cannot hold a NUL (TEXT refuses it, and libpq would cut the value there): such a value is
  // refused, not stored cut short, and the statement can be run again with another.
  {
    auto nul = db->prepare("INSERT INTO t(id, name) VALUES(?1, ?2)");
    ASSERT_TRUE(nul);
    nul->bind(1, std::int64_t{3}).bind(2, std::string("a\0b", 3));
    auto refused = nul->run();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::InvalidRequest);
    EXPECT_NE(refused.error().message.find("NUL"), std::string::npos) << refused.error().message;
    nul->reset();
    nul->bind(1, std::int64_t{3}).bind(2, "ab");
    auto ok = nul->run();
    ASSERT_TRUE(ok) << ok.error().message;
    auto del = db->prepare("DELETE FROM t WHERE id = 3");
    ASSERT_TRUE(del && del->run());
  }

  auto update = db->prepare("UPDATE t SET n = n + 1");
  ASSERT_TRUE(update);
  ASSERT_TRUE(update->run());
  EXPECT_EQ(db->changes(), 2);
}

TEST(Postgres, AStatementRunAgainTakesItsNewBindings) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)");
  ASSERT_TRUE(db);
  for (int i = 1; i <= 3; ++i) {
    auto st = db->prepare("INSERT INTO t(id, name) VALUES(?, ?)");
    ASSERT_TRUE(st);
    st->bind(1, std::int64_t{i}).bind(2, "n" + std::to_string(i));
    ASSERT_TRUE(st->run());
  }
  auto st = db->prepare("SELECT name FROM t WHERE id = ?1");
  ASSERT_TRUE(st);
  st->bind(1, std::int64_t{3});
  ASSERT_TRUE(*st->step());
  EXPECT_EQ(st->text(0), "n3");
  st->reset();
  st->bind(1, std::int64_t{1});
  ASSERT_TRUE(*st->step());
  EXPECT_EQ(st->text(0), "n1");
}

TEST(Postgres, AFailedTransactionLeavesNothingAndTheNextOneWorks) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY)");
  ASSERT_TRUE(db);
  {
    Database::Transaction tx(*db);
    ASSERT_TRUE(tx.begun());
    ASSERT_TRUE(db->run("INSERT INTO t VALUES(1)"));
    auto dup = db->run("INSERT INTO t VALUES(1)");
    ASSERT_FALSE(dup);
    EXPECT_EQ(dup.error().code, ErrorCode::Internal);
    EXPECT_NE(dup.error().message.find("duplicate key"), std::string::npos) << dup.error().message;
  }
  EXPECT_EQ(count_rows(*db, "t"), 0);
  Database::Transaction tx(*db);
  ASSERT_TRUE(db->run("INSERT INTO t VALUES(1)"));
  ASSERT_TRUE(tx.commit());
  EXPECT_EQ(count_rows(*db, "t"), 1);
}

TEST(Postgres, ASecondServerOnTheSameSchemaIsRefused) {
  SKIP_WITHOUT_POSTGRES(url);
  auto first = open_ok(*url);
  ASSERT_TRUE(first);
  auto second = PostgresDatabase::open({.url = *url});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::Conflict);
  EXPECT_NE(second.error().message.find("in use by another Switchboard"), std::string::npos)
      << second.error().message;
  // Another schema of the same database is another store.
  auto other = PostgresDatabase::open(
      {.url = test::postgres_schema_url(test::schema_name_for(test_name() + ".other"), true)});
  EXPECT_TRUE(other) << other.error().message;
  first.reset();
  EXPECT_TRUE(open_ok(*url));
}

// A broken connection fails its statement; a new one is made in the background, so statements
// fail at once (Unavailable, naming postgres) until it is there, and then run.
TEST(Postgres, ABrokenConnectionFailsItsStatementAndANewOneIsMadeInTheBackground) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY)");
  ASSERT_TRUE(db);
  terminate_backend_of(*db);
  auto lost = db->run("INSERT INTO t VALUES(1)");
  ASSERT_FALSE(lost);
  EXPECT_EQ(lost.error().code, ErrorCode::Unavailable) << lost.error().message;
  EXPECT_EQ(lost.error().message.rfind("postgres: ", 0), 0u) << lost.error().message;
  EXPECT_TRUE(eventually([&] {
    auto again = db->run("INSERT INTO t VALUES(2)");
    if (!again) {
      EXPECT_EQ(again.error().code, ErrorCode::Unavailable) << again.error().message;
      EXPECT_EQ(again.error().message.rfind("postgres: ", 0), 0u) << again.error().message;
    }
    return again.has_value();
  }));
  EXPECT_EQ(count_rows(*db, "t"), 1);
  // The store's lock came back with the connection.
  auto second = PostgresDatabase::open({.url = *url});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::Conflict);
}

// A restart of PostgreSQL found by a BEGIN (a turn's write is often the first statement after it):
// that transaction fails, it opened none, and the next one runs on a new connection.
TEST(Postgres, ABeginOnABrokenConnectionFailsOnceAndTheNextTransactionRuns) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY)");
  ASSERT_TRUE(db);
  terminate_backend_of(*db);
  {
    Database::Transaction tx(*db);
    ASSERT_FALSE(tx.begun());
    EXPECT_EQ(tx.begun().error().code, ErrorCode::Unavailable);
  }
  EXPECT_TRUE(eventually([&] {
    Database::Transaction tx(*db);
    if (!tx.begun()) return false;
    EXPECT_TRUE(db->run("INSERT INTO t VALUES(1)"));
    EXPECT_TRUE(tx.commit());
    return true;
  }));
  EXPECT_EQ(count_rows(*db, "t"), 1);
}

// Cut off while another server took the store: this one's statements fail with Unavailable (the
// store is not its any more), never run on the other's store, and it does not take it back.
TEST(Postgres, AStoreTakenWhileTheConnectionWasLostIsUnavailable) {
  SKIP_WITHOUT_POSTGRES(url);
  auto first = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY)");
  ASSERT_TRUE(first);
  // Taken before the first one finds its connection broken (it connects again at once then).
  terminate_backend_of(*first);
  std::unique_ptr<PostgresDatabase> second;
  ASSERT_TRUE(eventually([&] {  // once the first one's server process has ended
    auto opened = PostgresDatabase::open({.url = *url});
    if (opened) second = std::move(*opened);
    return second != nullptr;
  }));
  // The first one's reconnects are refused with the reason, and it writes nothing.
  Error refused{ErrorCode::Internal, ""};
  EXPECT_TRUE(eventually([&] {
    auto r = first->run("INSERT INTO t VALUES(2)");
    EXPECT_FALSE(r);
    if (r) return true;
    refused = r.error();
    return refused.message.find("in use by another") != std::string::npos;
  })) << refused.message;
  EXPECT_EQ(refused.code, ErrorCode::Unavailable);
  EXPECT_EQ(count_rows(*second, "t"), 0);
}

TEST(Postgres, AConnectionLostInATransactionRunsNothingMoreOfIt) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY)");
  ASSERT_TRUE(db);
  {
    Database::Transaction tx(*db);
    ASSERT_TRUE(tx.begun());
    ASSERT_TRUE(db->run("INSERT INTO t VALUES(1)"));
    terminate_backend_of(*db);
    EXPECT_FALSE(db->run("INSERT INTO t VALUES(2)"));
    // Not on a new connection, on its own: the rest of the transaction fails too.
    auto third = db->run("INSERT INTO t VALUES(3)");
    ASSERT_FALSE(third);
    EXPECT_EQ(third.error().code, ErrorCode::Unavailable);
    auto committed = tx.commit();
    ASSERT_FALSE(committed);
    EXPECT_EQ(committed.error().code, ErrorCode::Unavailable);
  }
  // Its ROLLBACK ended it; the statements after it run on the new connection.
  ASSERT_TRUE(eventually([&] { return db->run("INSERT INTO t VALUES(4)").has_value(); }));
  EXPECT_EQ(count_rows(*db, "t"), 1);
}

// A transaction whose connection broke while no new one can be made (here: another server holds
// the store meanwhile) ends with its ROLLBACK all the same, which needs no server: the store is
// not left waiting for the end of a transaction for ever, and runs again once it can connect.
TEST(Postgres, ATransactionLostWhileTheServerCannotBeReachedStillEnds) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = open_with_table(*url, "CREATE TABLE t (id INTEGER PRIMARY KEY)");
  ASSERT_TRUE(db);
  std::unique_ptr<PostgresDatabase> other;
  {
    Database::Transaction tx(*db);
    ASSERT_TRUE(tx.begun());
    ASSERT_TRUE(db->run("INSERT INTO t VALUES(1)"));
    terminate_backend_of(*db);
    ASSERT_TRUE(eventually([&] {
      auto opened = PostgresDatabase::open({.url = *url});
      if (opened) other = std::move(*opened);
      return other != nullptr;
    }));
    EXPECT_FALSE(db->run("INSERT INTO t VALUES(2)"));
  }  // its ROLLBACK
  auto refused = db->run("INSERT INTO t VALUES(3)");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message.find("during a transaction"), std::string::npos)
      << refused.error().message;
  other.reset();
  ASSERT_TRUE(eventually([&] { return db->run("INSERT INTO t VALUES(4)").has_value(); }));
  EXPECT_EQ(count_rows(*db, "t"), 1);
}

TEST(Postgres, AStatementOverItsTimeIsCancelled) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db =
      PostgresDatabase::open({.url = *url, .statement_timeout = std::chrono::milliseconds(200)});
  ASSERT_TRUE(db) << db.error().message;
  auto started = std::chrono::steady_clock::now();
  auto slept = (*db)->run("SELECT pg_sleep(5)");
  ASSERT_FALSE(slept);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
  EXPECT_NE(slept.error().message.find("statement timeout"), std::string::npos)
      << slept.error().message;
  EXPECT_TRUE((*db)->run("SELECT 1"));  // the connection goes on
}

// A statement_timeout that the URL sets is the server's, and the answer is waited for by it, not
// by the option's (which the server does not use then): a statement that runs past the option's
// time + 2 s but within the URL's is answered, and the connection goes on.
TEST(Postgres, TheAnswerIsWaitedForByTheTimeoutTheServerKeeps) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = PostgresDatabase::open({.url = *url + "%20-cstatement_timeout%3D6000",
                                    .statement_timeout = std::chrono::milliseconds(100)});
  ASSERT_TRUE(db) << db.error().message;
  auto slept = (*db)->run("SELECT pg_sleep(2.5)");
  EXPECT_TRUE(slept) << slept.error().message;
  EXPECT_TRUE((*db)->run("SELECT 1"));
}

// Both ends of the connection notice a peer that vanished within seconds: the server's backend
// would otherwise hold this server's locks for hours after a partition.
TEST(Postgres, BothEndsOfTheConnectionSendKeepalives) {
  SKIP_WITHOUT_POSTGRES(url);
  auto db = PostgresDatabase::open({.url = *url});
  ASSERT_TRUE(db) << db.error().message;
  std::lock_guard lock((*db)->mutex());
  auto st = (*db)->prepare(
      "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_count'), "
      "current_setting('tcp_user_timeout'), (SELECT client_addr IS NOT NULL FROM "
      "pg_stat_activity WHERE pid = pg_backend_pid())");
  ASSERT_TRUE(st);
  ASSERT_TRUE(*st->step());
  if (!st->integer(3)) GTEST_SKIP() << "a Unix socket: keepalives do not apply";
  EXPECT_EQ(st->text(0), "5");
  EXPECT_EQ(st->text(1), "3");
  EXPECT_EQ(st->text(2), "15000");  // ms
}

TEST(Postgres, AServerThatIsNotThereIsUnavailableAndABadUrlIsInvalid) {
  // A port nothing listens on: refused at once.
  auto down = PostgresDatabase::open({.url = "postgresql://switchboard@127.0.0.1:1/none"});
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, ErrorCode::Unavailable);
  EXPECT_NE(down.error().message.find("cannot connect"), std::string::npos) << down.error().message;
  auto bad = PostgresDatabase::open({.url = "postgresql://[::1"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidRequest) << bad.error().message;
}

}  // namespace
}  // namespace sb::store

namespace sb::store {
namespace {

std::unique_ptr<PostgresDatabase> open_node(const std::string& url, const std::string& node) {
  auto db = PostgresDatabase::open({.url = url, .node_id = node});
  EXPECT_TRUE(db) << node << ": " << db.error().message;
  return db ? std::move(*db) : nullptr;
}

// `done` within 5 s (a closed connection's server process, and so its locks, ends a moment
// after the close).
// try_lock() as a node calls it (holding the mutex): whether the lock is this connection's now.
bool lock(Database& db, const std::string& name) {
  std::lock_guard guard(db.mutex());
  auto r = db.try_lock(name);
  EXPECT_TRUE(r) << r.error().message;
  return r && *r;
}

}  // namespace

// The nodes of a cluster share one store, each with an ID of its own; a single server and a
// cluster exclude each other, as two nodes with one ID do (each refused naming why).
TEST(Postgres, NodesOfAClusterShareTheStoreAndExcludeASingleServerAndTwinIds) {
  SKIP_WITHOUT_POSTGRES(url);
  auto a = open_node(*url, "a");
  auto b = open_node(*url, "b");
  ASSERT_TRUE(a && b);
  auto twin = PostgresDatabase::open({.url = *url, .node_id = "a"});
  ASSERT_FALSE(twin);
  EXPECT_EQ(twin.error().code, ErrorCode::Conflict);
  EXPECT_NE(twin.error().message.find("node ID \"a\""), std::string::npos) << twin.error().message;
  auto single = PostgresDatabase::open({.url = *url});
  ASSERT_FALSE(single);
  EXPECT_EQ(single.error().code, ErrorCode::Conflict);
  a.reset();
  b.reset();
  std::unique_ptr<PostgresDatabase> alone;
  EXPECT_TRUE(eventually([&] {
    auto db = PostgresDatabase::open({.url = *url});
    if (db) alone = std::move(*db);
    return alone != nullptr;
  }));
  ASSERT_TRUE(alone);
  auto node = PostgresDatabase::open({.url = *url, .node_id = "c"});
  ASSERT_FALSE(node);
  EXPECT_NE(node.error().message.find("not a node of a cluster"), std::string::npos)
      << node.error().message;
}

// A named lock is one node's at a time, taken again by its holder at once, free for the others
// once it is given up or its holder's connection ends.
TEST(Postgres, ANamedLockIsOneNodesAtATimeAndGoesWithItsConnection) {
  SKIP_WITHOUT_POSTGRES(url);
  auto a = open_node(*url, "a");
  auto b = open_node(*url, "b");
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(lock(*a, "session:s1"));
  EXPECT_TRUE(lock(*a, "session:s1"));  // its holder's again
  EXPECT_FALSE(lock(*b, "session:s1"));
  EXPECT_TRUE(lock(*b, "session:s2"));  // another name is another lock
  {
    std::lock_guard guard(a->mutex());
    a->unlock("session:s1");
  }
  EXPECT_TRUE(lock(*b, "session:s1"));
  EXPECT_FALSE(lock(*a, "session:s1"));
  // b's connection ends: what it held is free (once its server process has ended, which
  // follows the close by a moment).
  b.reset();
  EXPECT_TRUE(eventually([&] { return lock(*a, "session:s1"); }));
  EXPECT_TRUE(lock(*a, "session:s2"));
}

// A connection that breaks gives its locks up; the next statement connects again and takes them
// again, except one that another node took meanwhile: that one is reported lost, once.
TEST(Postgres, LocksAreTakenAgainAfterAReconnectAndOneTakenMeanwhileIsReportedLost) {
  SKIP_WITHOUT_POSTGRES(url);
  auto a = open_node(*url, "a");
  auto b = open_node(*url, "b");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(lock(*a, "session:kept"));
  ASSERT_TRUE(lock(*a, "session:taken"));
  terminate_backend_of(*a);
  // Free once a's server process has ended (pg_terminate_backend does not wait for it).
  EXPECT_TRUE(eventually([&] { return lock(*b, "session:taken"); }));
  EXPECT_FALSE(a->run("SELECT 1"));  // the broken connection's statement
  ASSERT_TRUE(eventually([&] { return a->run("SELECT 1").has_value(); }));  // connected again
  EXPECT_EQ(a->take_lost_locks(), std::vector<std::string>{"session:taken"});
  EXPECT_TRUE(a->take_lost_locks().empty());
  EXPECT_FALSE(lock(*b, "session:kept"));  // a holds it again
  EXPECT_FALSE(lock(*a, "session:taken"));
}

}  // namespace sb::store
