// store::Database::Transaction: what was written either all lands or none of it does, and a
// transaction that failed leaves the connection ready for the next one. store::Database on a
// file: checkpoints on a thread of its own with the log kept short, one Database per file, commits
// that survive a kill, and writes that find the store busy go on as soon as it is free.
#include "store/sqlite.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

namespace sb::store {
namespace {

std::int64_t count_rows(Database& db, std::string_view table) {
  auto st = db.prepare("SELECT count(*) FROM " + std::string(table));
  EXPECT_TRUE(st);
  auto row = st->step();
  EXPECT_TRUE(row && *row);
  return st->integer(0);
}

std::unique_ptr<SqliteDatabase> database_with_a_deferred_key() {
  auto db = SqliteDatabase::open_memory();
  EXPECT_TRUE(db) << db.error().message;
  // A deferred foreign key is checked at COMMIT: the way to make a COMMIT fail and leave the
  // transaction open, as a full disk can.
  auto made = (*db)->exec(
      "CREATE TABLE parent(id INTEGER PRIMARY KEY);"
      "CREATE TABLE child(parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);");
  EXPECT_TRUE(made) << made.error().message;
  return std::move(*db);
}

TEST(Transaction, AFailedCommitIsRolledBackAndTheNextTransactionWorks) {
  auto db = database_with_a_deferred_key();
  {
    Database::Transaction tx(*db);
    ASSERT_TRUE(db->exec("INSERT INTO parent(id) VALUES(1); INSERT INTO child VALUES(2)"));
    auto committed = tx.commit();
    ASSERT_FALSE(committed);
    EXPECT_NE(committed.error().message.find("FOREIGN KEY"), std::string::npos)
        << committed.error().message;
  }
  EXPECT_EQ(count_rows(*db, "parent"), 0);  // the good row went with the bad one
  EXPECT_EQ(count_rows(*db, "child"), 0);

  Database::Transaction next(*db);
  ASSERT_TRUE(db->exec("INSERT INTO parent(id) VALUES(1); INSERT INTO child VALUES(1)"));
  auto committed = next.commit();
  ASSERT_TRUE(committed) << committed.error().message;
  EXPECT_EQ(count_rows(*db, "child"), 1);
}

TEST(Transaction, OneThatCouldNotBeginCannotCommitAnotherOnesWrites) {
  auto db = database_with_a_deferred_key();
  Database::Transaction outer(*db);
  ASSERT_TRUE(db->exec("INSERT INTO parent(id) VALUES(1)"));
  {
    Database::Transaction inner(*db);  // BEGIN inside a transaction fails
    ASSERT_FALSE(inner.begun());
    auto committed = inner.commit();
    ASSERT_FALSE(committed);
    EXPECT_NE(committed.error().message.find("within a transaction"), std::string::npos)
        << committed.error().message;
  }
  // The inner one neither committed nor rolled back the outer one's row.
  auto committed = outer.commit();
  ASSERT_TRUE(committed) << committed.error().message;
  EXPECT_EQ(count_rows(*db, "parent"), 1);
}

// A fresh directory, removed with what is in it.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("sb-database-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::uintmax_t size_or_zero(const std::filesystem::path& file) {
  std::error_code ec;
  auto size = std::filesystem::file_size(file, ec);
  return ec ? 0 : size;
}

void insert_row(Database& db, std::int64_t id, const std::string& text) {
  std::lock_guard lock(db.mutex());
  Database::Transaction tx(db);
  ASSERT_TRUE(tx.begun());
  {
    auto st = db.prepare("INSERT INTO t(id, text) VALUES(?1, ?2)");
    ASSERT_TRUE(st);
    st->bind(1, id).bind(2, text);
    ASSERT_TRUE(st->run());
  }
  auto committed = tx.commit();
  ASSERT_TRUE(committed) << committed.error().message;
}

constexpr std::uintmax_t kFrameBytes = 24 + 4096;  // a WAL frame: its header and a page

// A database at `path` with the table t(id, text) that insert_row writes.
Result<std::unique_ptr<SqliteDatabase>> open_with_table(const std::filesystem::path& path,
                                                        DatabaseOptions options = {}) {
  auto db = SqliteDatabase::open(path, options);
  if (!db) return db.error();
  if (auto r = (*db)->exec("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT NOT NULL)"); !r)
    return r.error();
  return db;
}

// A writer that never pauses: the log is copied on another thread than the writer's, and
// stays bounded (past restart_pages it is started over); once writes stop,
// it is truncated. Every row is there.
TEST(Checkpoints, RunOffTheWritersThreadAndKeepTheLogBounded) {
  TempDir dir;
  DatabaseOptions options;
  options.checkpoint_pages = 64;
  options.restart_pages = 512;
  options.idle_truncate = std::chrono::milliseconds(100);
  auto db = open_with_table(dir.path() / "a.db", options);
  ASSERT_TRUE(db) << db.error().message;
  auto wal = dir.path() / "a.db-wal";
  std::uintmax_t largest = 0;
  constexpr int kRows = 4000;
  for (int i = 0; i < kRows; ++i) {
    insert_row(**db, i, std::string(3000, static_cast<char>('a' + i % 26)));
    largest = std::max(largest, size_or_zero(wal));
  }
  auto stats = (*db)->checkpoint_stats();
  EXPECT_GT(stats.passes, 0u);
  EXPECT_NE(stats.thread, std::thread::id());
  EXPECT_NE(stats.thread, std::this_thread::get_id());
  // 4,000 rows of a page or more each are over 16 MiB of log without a copy; the bound leaves
  // room for what the writer adds while a copy runs.
  EXPECT_LT(largest, 4 * 512 * kFrameBytes)
      << "largest log: " << largest << " bytes, " << stats.writer_copies << " copies by the writer";
  // Quiet: the log goes down to nothing.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // (The count goes up just after the truncation.)
  while ((size_or_zero(wal) > 0 || (*db)->checkpoint_stats().truncations == 0) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(size_or_zero(wal), 0u);
  EXPECT_GT((*db)->checkpoint_stats().truncations, 0u);
  std::lock_guard lock((*db)->mutex());
  EXPECT_EQ(count_rows(**db, "t"), kRows);
}

// Another connection holds the writer lock (as the checkpoint thread's RESTART copy does). A write
// waits, and goes on within a few ms of the lock's release (SQLite's default busy handler sleeps 1,
// 2, 5, 10, ... 25 ms between tries: 20 ms late or more here).
TEST(BusyStore, AWriteGoesOnAsSoonAsTheStoreIsFree) {
  TempDir dir;
  auto db = open_with_table(dir.path() / "a.db");
  ASSERT_TRUE(db) << db.error().message;
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> holding{false};
  std::atomic<Clock::rep> released{0};
  std::thread other([&] {
    sqlite3* conn = nullptr;
    ASSERT_EQ(sqlite3_open((dir.path() / "a.db").c_str(), &conn), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(conn, "BEGIN IMMEDIATE; INSERT INTO t VALUES(1, 'other')", nullptr,
                           nullptr, nullptr),
              SQLITE_OK);
    holding = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    EXPECT_EQ(sqlite3_exec(conn, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    released = Clock::now().time_since_epoch().count();
    sqlite3_close(conn);
  });
  while (!holding)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = Clock::now();
  insert_row(**db, 2, "waited");
  auto done = Clock::now();
  other.join();
  EXPECT_GT(done - start, std::chrono::milliseconds(50)) << "the write did not wait";
  auto late = done - Clock::time_point(Clock::duration(released.load()));
  EXPECT_LT(late, std::chrono::milliseconds(10))
      << std::chrono::duration<double, std::milli>(late).count() << " ms after the release";
  std::lock_guard lock((*db)->mutex());
  EXPECT_EQ(count_rows(**db, "t"), 2);
}

// One Database per file: a second one (another server on the same data directory) is refused,
// naming why, until the first is closed. The lock is an flock() on a file beside the database,
// so it holds between processes as it does within one.
TEST(Checkpoints, ASecondDatabaseOnTheFileIsRefusedUntilTheFirstCloses) {
  TempDir dir;
  auto first = SqliteDatabase::open(dir.path() / "a.db");
  ASSERT_TRUE(first) << first.error().message;
  auto second = SqliteDatabase::open(dir.path() / "a.db");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::Conflict);
  EXPECT_NE(second.error().message.find("is in use by another process"), std::string::npos)
      << second.error().message;
  // Another process: a child that tries to open it exits 1 on the conflict.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto other = SqliteDatabase::open(dir.path() / "a.db");
    ::_exit(!other && other.error().code == ErrorCode::Conflict ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  first->reset();
  auto reopened = SqliteDatabase::open(dir.path() / "a.db");
  EXPECT_TRUE(reopened) << reopened.error().message;
}

// A process killed (SIGKILL) while it commits and its checkpoint thread copies: every commit
// that returned is there when the file is opened again.
// SIGKILL lands while the child still commits (and its thread copies the log, every 32 pages):
// every commit the child reported is there afterwards, and the file is intact. Several rounds,
// each killed after a different number of commits.
TEST(Checkpoints, CommitsSurviveAKillDuringCheckpoints) {
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    TempDir dir;
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(report[0]);
      DatabaseOptions options;
      options.checkpoint_pages = 32;
      options.restart_pages = 256;
      auto db = open_with_table(dir.path() / "a.db", options);
      if (!db) ::_exit(2);
      for (int i = 0;; ++i) {  // until killed
        insert_row(**db, i, std::string(3000, 'k'));
        std::uint32_t done = static_cast<std::uint32_t>(i + 1);
        if (::write(report[1], &done, sizeof done) != sizeof done) ::_exit(3);
      }
    }
    ::close(report[1]);
    // Killed after 300, 500, 700, 900 reported commits: copies run all along by then.
    std::uint32_t reported = 0, n = 0;
    while (reported < 300u + 200u * static_cast<unsigned>(round) &&
           ::read(report[0], &n, sizeof n) == sizeof n)
      reported = n;
    ::kill(child, SIGKILL);
    while (::read(report[0], &n, sizeof n) == sizeof n)  // what it wrote before it died
      reported = n;
    ::close(report[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    ASSERT_GE(reported, 300u) << "the child stopped writing early";
    auto db = SqliteDatabase::open(dir.path() / "a.db");
    ASSERT_TRUE(db) << db.error().message;
    std::lock_guard lock((*db)->mutex());
    // Every reported commit, and at most the one it was making when killed.
    auto rows = count_rows(**db, "t");
    EXPECT_GE(rows, static_cast<std::int64_t>(reported));
    EXPECT_LE(rows, static_cast<std::int64_t>(reported) + 1);
    auto st = (*db)->prepare("PRAGMA integrity_check");
    ASSERT_TRUE(st);
    ASSERT_TRUE(st->step());
    EXPECT_EQ(st->text(0), "ok");
  }
}

}  // namespace
}  // namespace sb::store
